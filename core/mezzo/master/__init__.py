"""The master (paper §3): who holds what, who is offered what, and what runs where.

Read it in this order:

- :mod:`.state` — :class:`~.state.ClusterState`, everything one leadership term
  knows (records, the offer book, refuse filters) and the primitives that move
  resources while keeping the allocator told. No event loop, no connection: a
  :class:`~.ports.Clock` and an :class:`~.ports.Outbox` (:mod:`.ports`).
- :mod:`.framework_lifecycle`, :mod:`.agent_lifecycle`, :mod:`.task_lifecycle` —
  how frameworks, agents and tasks come and go, built from those primitives;
  :mod:`.launch` (pure launch validation), :mod:`.allocation` (the cycle, all or
  nothing), :mod:`.recovery`, :mod:`.revocation_monitor`, :mod:`.long_tasks`.
- :mod:`.service` — the RPC handler: who is calling, is the input sound, then the
  lifecycles. :mod:`.leadership` routes calls to it while this master leads.
- :mod:`.master` — the composition root: socket, election, plugins, one
  :class:`~.term.Term` per leadership term.
"""

from .master import Master

__all__ = ["Master"]
