"""Calls from the wrong side of an agent are dropped, and dropping one costs nothing else.

The agent serves its master and its executors with one ``Agent`` handler; each call
is checked to come from the side allowed to make it (``mezzo.agent.service``). Found
by the structure-aware fuzzer (tests/test_fuzz_services.py): an executor's
``register_executor`` arriving on the master link made the agent answer the master
with ``Executor.shutdown`` and close its own master link, so it re-registered.
"""

from __future__ import annotations

from agent_harness import FRAMEWORK, ScriptedMaster, agent_config, command_task, name, run, running_agent


def test_an_executor_call_on_the_master_link_is_dropped_and_the_link_kept(tmp_path):
    async def main():
        master = await ScriptedMaster().start()
        async with running_agent(agent_config(tmp_path, master.address)):
            link = master.agent_conn
            master.agent.register_executor("fw-1", "no-such-executor")
            # Calls after it on the same link are still the master's: the link was kept.
            master.agent.run_task(FRAMEWORK, command_task("t1", "true"))
            assert name((await master.wait_final("t1")).state) == "TASK_FINISHED"
            assert master.agent_conn is link and link.is_open
            assert len(master.called("register_agent")) == 1 and not master.called("reregister_agent")
        await master.close()

    run(main())
