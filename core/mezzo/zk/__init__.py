"""ZooKeeper: leader election of masters and detection of the leader (paper §3.6).

- :mod:`.url`: ``zk://host:port[,host:port...]/path`` addresses, parsed with errors
  that say what is wrong.
- :mod:`.election`: :class:`LeaderElection`, a master contending for leadership and
  publishing its address; it is demoted the moment its session is in doubt.
- :mod:`.detector`: :class:`LeaderDetector`, how agents, drivers and tools follow
  the current leader.
- :mod:`.mesos_discovery`: the leader's ``json.info_`` node, how Mesos frameworks
  (pymesos) given ``zk://`` find it.
- :mod:`.client`: how both open their session, with one retry policy (kazoo's
  backoff with jitter, capped at a few seconds).

kazoo runs its own threads; these classes call back on them, and their users hand
the news to their event loop (``loop.call_soon_threadsafe``).
"""

from .detector import LeaderDetector, shared_detector
from .election import LeaderElection
from .url import ZkUrl, parse_zk_url

__all__ = ["LeaderDetector", "LeaderElection", "ZkUrl", "parse_zk_url", "shared_detector"]
