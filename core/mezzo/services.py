"""The schemas of the five services of ``thrift/mezzo.thrift``, built once per process.

``MASTER`` is what a master serves, ``SCHEDULER`` what a scheduler driver serves
on its connection to the master, and so on; a :class:`~mezzo.rpc.Connection`
serves one schema and calls the peer's through ``connection.remote(OTHER)``.
"""

from .rpc import ServiceSchema
from .wire import Agent, Executor, Master, Scheduler, Tool

MASTER = ServiceSchema(Master)
SCHEDULER = ServiceSchema(Scheduler)
AGENT = ServiceSchema(Agent)
EXECUTOR = ServiceSchema(Executor)
TOOL = ServiceSchema(Tool)

EXECUTOR_TOKEN_ENV = "MEZZO_EXECUTOR_TOKEN"
"""The environment variable through which an agent gives an executor it starts the
token that executor registers with (``Agent.register_executor``)."""
