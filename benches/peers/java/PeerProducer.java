// The Java client (kafka-clients 3.9.1) as a peer in benches/peers.rs: the same arguments,
// records, partitions and result line as the Rust clients there.
//
// Compiled by the peer benchmark with the machine's javac; run as
//   java -cp classes:kafka-clients.jar:slf4j-api.jar PeerProducer --bootstrap ... --topic ...

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class PeerProducer {
    // The same log-linear buckets as the Rust harness (latency.rs): 128 per power of two.
    static final int SUB_BITS = 7;
    static final int SUB = 1 << SUB_BITS;
    static final int MAX_BITS = 42;
    static final AtomicLongArray COUNTS = new AtomicLongArray((MAX_BITS - SUB_BITS + 1) * SUB);
    static final AtomicLong TOTAL = new AtomicLong();
    static final AtomicLong SUM = new AtomicLong();
    static final AtomicLong MAX = new AtomicLong();
    static final AtomicLong ERRORS = new AtomicLong();

    static int bucketOf(long v) {
        v = Math.min(v, (1L << MAX_BITS) - 1);
        if (v < SUB) return (int) v;
        int exp = 63 - Long.numberOfLeadingZeros(v);
        int shift = exp - SUB_BITS;
        int mantissa = (int) (v >>> shift) - SUB;
        return (shift + 1) * SUB + mantissa;
    }

    static long bucketHigh(int b) {
        if (b < SUB) return b;
        int shift = b / SUB - 1;
        long mantissa = b % SUB + SUB;
        return ((mantissa + 1) << shift) - 1;
    }

    static void record(long ns) {
        COUNTS.incrementAndGet(bucketOf(ns));
        TOTAL.incrementAndGet();
        SUM.addAndGet(ns);
        MAX.accumulateAndGet(ns, Math::max);
    }

    static long quantile(double q) {
        long n = TOTAL.get();
        if (n == 0) return 0;
        long rank = Math.max(1, Math.min(n, (long) Math.ceil(q * n)));
        long seen = 0;
        for (int b = 0; b < COUNTS.length(); b++) {
            seen += COUNTS.get(b);
            if (seen >= rank) return Math.min(bucketHigh(b), MAX.get());
        }
        return MAX.get();
    }

    static long peakRssBytes() {
        try {
            for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
                }
            }
        } catch (Exception e) {
            // fall through
        }
        return 0;
    }

    static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        String topic = a.get("topic");
        int partitions = Integer.parseInt(a.get("partitions"));
        long records = Long.parseLong(a.get("records"));
        int size = Integer.parseInt(a.get("size"));
        double rate = Double.parseDouble(a.get("rate"));
        int batchSize = Integer.parseInt(a.get("batch-size"));
        long block = Math.max(1, batchSize / (size + 12));

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        props.put(ProducerConfig.LINGER_MS_CONFIG, a.get("linger-ms"));
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, a.get("batch-size"));
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, a.getOrDefault("compression", "none"));
        props.put(ProducerConfig.BUFFER_MEMORY_CONFIG, String.valueOf(32L << 20));
        props.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, String.valueOf(Math.max(batchSize, 1 << 20) + 4096));
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        byte[] template = new byte[size];
        long state = 0x2545f4914f6cdd1dL;
        for (int i = 0; i < size; i++) {
            state ^= state << 13;
            state ^= state >>> 7;
            state ^= state << 17;
            template[i] = (byte) ('A' + Long.remainderUnsigned(state, 26));
        }

        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int p = 0; p < partitions; p++) {
                producer.send(new ProducerRecord<>(topic, p, null, new byte[8])).get();
            }
            long interval = rate > 0 ? (long) (1e9 / rate) : 0;
            long cpu0 = processCpuNanos();
            long start = System.nanoTime();
            for (long seq = 0; seq < records; seq++) {
                if (interval > 0) {
                    long due = start + seq * interval;
                    long now = System.nanoTime();
                    if (due > now + 2000) LockSupport.parkNanos(due - now);
                }
                byte[] value = template.clone();
                if (size >= 8) ByteBuffer.wrap(value).putLong(0, seq);
                int partition = (int) ((seq / block) % partitions);
                final long sent = System.nanoTime();
                producer.send(new ProducerRecord<>(topic, partition, null, value), (metadata, e) -> {
                    record(System.nanoTime() - sent);
                    if (e != null) ERRORS.incrementAndGet();
                });
            }
            producer.flush();
            long elapsed = System.nanoTime() - start;
            long cpu = processCpuNanos() - cpu0;
            System.out.printf(
                    "result records=%d elapsed_s=%.6f errors=%d avg_us=%.3f p50_us=%.3f p99_us=%.3f p999_us=%.3f max_us=%.3f cpu_s=%.6f rss_bytes=%d%n",
                    records, elapsed / 1e9, ERRORS.get(),
                    TOTAL.get() == 0 ? 0.0 : SUM.get() / (double) TOTAL.get() / 1e3,
                    quantile(0.5) / 1e3, quantile(0.99) / 1e3, quantile(0.999) / 1e3, MAX.get() / 1e3,
                    cpu / 1e9, peakRssBytes());
            System.out.flush();
        }
    }
}
