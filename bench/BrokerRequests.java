// The broker's request counters over JMX, once a second, for bench/broker_requests.py.
//
//   java bench/BrokerRequests.java JMX_PORT SECONDS
//
// Each line: the system's monotonic clock (System.nanoTime, CLOCK_MONOTONIC on Linux:
// the clock Python's time.monotonic() reads), then name=count pairs, all cumulative:
// req.KIND (RequestsPerSec by request kind, all versions), local_ms.KIND and
// total_ms.KIND (the sums of LocalTimeMs and TotalTimeMs: the broker's own work, and
// that plus queueing and a fetch's wait), fetch.TOPIC and produce.TOPIC (partition
// fetches and produces of each topic), msgs.TOPIC and bytes.TOPIC (records and bytes written).
import java.util.Map;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class BrokerRequests {
  public static void main(String[] args) throws Exception {
    String url = "service:jmx:rmi:///jndi/rmi://127.0.0.1:" + args[0] + "/jmxrmi";
    double seconds = Double.parseDouble(args[1]);
    MBeanServerConnection jmx = JMXConnectorFactory.connect(new JMXServiceURL(url))
        .getMBeanServerConnection();
    long start = System.nanoTime();
    while ((System.nanoTime() - start) / 1e9 <= seconds) {
      Map<String, Double> counts = new TreeMap<>();
      add(jmx, counts, "kafka.network:type=RequestMetrics,name=RequestsPerSec,*", "request", "req.", false);
      add(jmx, counts, "kafka.network:type=RequestMetrics,name=LocalTimeMs,*", "request", "local_ms.", true);
      add(jmx, counts, "kafka.network:type=RequestMetrics,name=TotalTimeMs,*", "request", "total_ms.", true);
      add(jmx, counts, "kafka.server:type=BrokerTopicMetrics,name=TotalFetchRequestsPerSec,*", "topic", "fetch.", false);
      add(jmx, counts, "kafka.server:type=BrokerTopicMetrics,name=TotalProduceRequestsPerSec,*", "topic", "produce.", false);
      add(jmx, counts, "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,*", "topic", "msgs.", false);
      add(jmx, counts, "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,*", "topic", "bytes.", false);
      StringBuilder line = new StringBuilder(String.format("%.3f", System.nanoTime() / 1e9));
      counts.forEach((k, v) -> line.append(' ').append(k).append('=').append(String.format("%.0f", v)));
      System.out.println(line);
      System.out.flush();
      Thread.sleep(1000);
    }
  }

  /** Sums the Count (or Count x Mean: a histogram's total) of the beans matching
   * pattern, by the value of their property key. */
  static void add(MBeanServerConnection jmx, Map<String, Double> counts, String pattern,
      String key, String prefix, boolean total) throws Exception {
    for (ObjectName name : jmx.queryNames(new ObjectName(pattern), null)) {
      String by = name.getKeyProperty(key);
      if (by == null) continue;
      double count = ((Number) jmx.getAttribute(name, "Count")).doubleValue();
      if (total) count *= ((Number) jmx.getAttribute(name, "Mean")).doubleValue();
      counts.merge(prefix + by, count, Double::sum);
    }
  }
}
