// The Java client (kafka-clients 3.9.1) reading a topic back for tests/java_judge.rs: every
// partition from its beginning to the end offset it had when the reader started, one line per
// record, "PARTITION OFFSET ID" (ID: the first 8 bytes of the value, big-endian).
//
//   java -cp classes:kafka-clients.jar:slf4j-api.jar JudgeConsumer BOOTSTRAP TOPIC PROPERTIES_FILE
//
// PROPERTIES_FILE holds the security settings. Exit status 1 if the end is not reached in 60 s.

import java.io.FileInputStream;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JudgeConsumer {
    public static void main(String[] argv) throws Exception {
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(argv[2])) {
            props.load(in);
        }
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, argv[0]);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        String topic = argv[1];
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions, Duration.ofSeconds(30));
            StringBuilder out = new StringBuilder();
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (true) {
                boolean done = true;
                for (TopicPartition tp : partitions) {
                    if (consumer.position(tp, Duration.ofSeconds(30)) < end.get(tp)) {
                        done = false;
                    }
                }
                if (done) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    System.out.print(out);
                    System.out.println("timed out before the end offsets " + end);
                    System.exit(1);
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    long id = ByteBuffer.wrap(r.value()).getLong();
                    out.append(r.partition()).append(' ').append(r.offset()).append(' ').append(id).append('\n');
                }
            }
            System.out.print(out);
        }
    }
}
