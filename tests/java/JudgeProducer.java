// The Java client (kafka-clients 3.9.1) as an independent judge of the reference cluster's
// listeners (tests/java_judge.rs): it produces records whose values start with their id, one
// partition per id modulo the partition count, with idempotence on, and reports how many were
// acknowledged.
//
//   java -cp classes:kafka-clients.jar:slf4j-api.jar JudgeProducer BOOTSTRAP TOPIC PARTITIONS COUNT PROPERTIES_FILE
//
// PROPERTIES_FILE holds the security settings (security.protocol, ssl.*, sasl.*). Exit status 0
// when every record was acknowledged; otherwise the first error is printed and the status is 1.

import java.io.FileInputStream;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class JudgeProducer {
    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0];
        String topic = argv[1];
        int partitions = Integer.parseInt(argv[2]);
        int count = Integer.parseInt(argv[3]);
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(argv[4])) {
            props.load(in);
        }
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        int acked = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>(count);
            for (long id = 0; id < count; id++) {
                byte[] value = ByteBuffer.allocate(16).putLong(id).putLong(~id).array();
                int partition = (int) (id % partitions);
                futures.add(producer.send(new ProducerRecord<>(topic, partition, null, value)));
            }
            producer.flush();
            for (Future<RecordMetadata> future : futures) {
                try {
                    future.get(60, TimeUnit.SECONDS);
                    acked++;
                } catch (Exception e) {
                    System.out.println("acked " + acked + " of " + count + "; first error: " + e);
                    System.exit(1);
                }
            }
        }
        System.out.println("acked " + acked + " of " + count);
    }
}
