"""``mezzo run``'s framework on the offers it gets (pure logic: the calls it would make;
tests/test_cli.py runs it against real clusters)."""

from __future__ import annotations

from mezzo.cli.run_task import _OneTask


class Calls:
    """Stands for the v1 client: records each call."""

    def __init__(self) -> None:
        self.made: list[tuple[str, dict | None]] = []

    def call(self, kind: str, body: dict | None = None) -> None:
        self.made.append((kind, body))


def offer(n: int, cpus: float) -> dict:
    return {
        "id": {"value": f"o{n}"},
        "agent_id": {"value": f"a{n}"},
        "hostname": f"h{n}",
        "resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": 1024}},
        ],
    }


def test_a_launch_costs_no_suppress_until_another_offer_comes() -> None:
    client = Calls()
    run = _OneTask(client, ["true"], {"cpus": 1.0, "mem": 16.0}, "mezzo-run")  # type: ignore[arg-type]
    run.handle({"type": "OFFERS", "offers": {"offers": [offer(1, 2)]}})
    assert [kind for kind, _ in client.made] == ["ACCEPT"]
    assert client.made[0][1]["offer_ids"] == [{"value": "o1"}] and run.agent_id == "a1"

    client.made.clear()
    run.handle({"type": "OFFERS", "offers": {"offers": [offer(2, 4)]}})
    assert client.made == [
        ("DECLINE", {"offer_ids": [{"value": "o2"}], "filters": {"refuse_seconds": 3600}}),
        ("SUPPRESS", None),
    ]
    client.made.clear()
    run.handle({"type": "OFFERS", "offers": {"offers": [offer(3, 4)]}})
    assert [kind for kind, _ in client.made] == ["DECLINE"], "suppressed once"


def test_the_first_fit_is_launched_and_the_rest_of_its_offers_declined_for_an_hour() -> None:
    client = Calls()
    run = _OneTask(client, ["true"], {"cpus": 1.0, "mem": 16.0}, "mezzo-run")  # type: ignore[arg-type]
    run.handle({"type": "OFFERS", "offers": {"offers": [offer(1, 0.5), offer(2, 2), offer(3, 2)]}})
    assert [kind for kind, _ in client.made] == ["ACCEPT", "DECLINE", "SUPPRESS"]
    assert client.made[0][1]["offer_ids"] == [{"value": "o2"}] and run.agent_id == "a2"
    assert client.made[1][1] == {"offer_ids": [{"value": "o1"}, {"value": "o3"}], "filters": {"refuse_seconds": 3600}}


def test_offers_too_small_are_declined_briefly_and_remembered_for_the_waiting_line() -> None:
    client = Calls()
    run = _OneTask(client, ["true"], {"cpus": 4.0, "mem": 16.0}, "mezzo-run")  # type: ignore[arg-type]
    run.handle({"type": "OFFERS", "offers": {"offers": [offer(1, 2), offer(2, 3)]}})
    assert client.made == [("DECLINE", {"offer_ids": [{"value": "o1"}, {"value": "o2"}], "filters": {"refuse_seconds": 1}})]
    assert run.most_free == {"cpus": 3, "mem": 1024} and not run.task_id
