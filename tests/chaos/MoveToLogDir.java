// Puts the partitions of TOPIC... in log dir DIR of broker 1 and every other topic's in
// OTHER (AlterReplicaLogDirs), and waits until they are there:
//   java -cp '<kafka libs>/*' MoveToLogDir.java BOOTSTRAP DIR OTHER TOPIC...
// Kafka's own kafka-reassign-partitions tool is not among the broker's Maven jars; the
// Admin client is, so the chaos suite's disk scenario runs this one file instead.
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartitionReplica;

public class MoveToLogDir {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        String dir = args[1], other = args[2];
        try (Admin admin = Admin.create(props)) {
            Set<String> chosen = new HashSet<>(Arrays.asList(args).subList(3, args.length));
            Set<String> all = admin.listTopics(new ListTopicsOptions().listInternal(true)).names().get();
            if (!all.containsAll(chosen)) {
                System.err.println("no such topic among " + chosen);
                System.exit(2);
            }
            Map<TopicPartitionReplica, String> moves = new HashMap<>();
            for (TopicDescription t : admin.describeTopics(all).allTopicNames().get().values()) {
                String to = chosen.contains(t.name()) ? dir : other;
                t.partitions().forEach(p -> moves.put(new TopicPartitionReplica(t.name(), p.partition(), 1), to));
            }
            admin.alterReplicaLogDirs(moves).all().get();
            for (int i = 0; i < 360; i++) {
                var where = admin.describeReplicaLogDirs(moves.keySet()).all().get();
                long done = where.entrySet().stream()
                    .filter(e -> e.getValue().getFutureReplicaLogDir() == null
                        && moves.get(e.getKey()).equals(e.getValue().getCurrentReplicaLogDir()))
                    .count();
                if (done == moves.size()) { System.out.println(chosen + " in " + dir + ", " + (done - 0) + " partitions placed"); return; }
                Thread.sleep(500);
            }
            System.err.println("partitions not in place after 180 s");
            System.exit(1);
        }
    }
}
