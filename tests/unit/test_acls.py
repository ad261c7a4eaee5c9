"""The master's ACLs as pure logic (:mod:`mezzo.acls`, issue 15).

What the module docstring promises: ``parse`` of ``[master.acls]`` (and through
:func:`mezzo.config.from_dict`, with the dotted key of every bad shape), first-match
semantics with deny rules, ``permissive`` decided by TLS unless given, the
:class:`View` a viewer gets (equal views are equal dict keys: they share a rendered
snapshot), ``single_tenant`` and ``to_toml`` round-tripping through ``tomllib``.
A Hypothesis property compares ``allows`` with a reference written here and checks
the invariant the state filter relies on: ``view_of(p).sees_user(u)`` is
``allows("view_frameworks", p, u)`` for every principal and user.
"""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mezzo.acls import (
    ACTIONS,
    ANY,
    FULL_VIEW,
    PERMISSIVE,
    Acls,
    Rule,
    View,
    parse,
    single_tenant,
    to_toml,
)
from mezzo.config import from_dict
from mezzo.errors import ConfigError

# -- parse: good tables --------------------------------------------------------------


def test_parse_the_module_docstrings_example() -> None:
    text = """
    [master.acls]
    permissive = false

    [[master.acls.register_frameworks]]
    principals = ["etl"]
    roles = ["batch"]

    [[master.acls.run_tasks]]
    principals = ["etl"]
    users = ["etl", "nobody"]

    [[master.acls.run_tasks]]
    principals = "*"
    users = ["root"]
    allow = false
    """
    acls = from_dict(tomllib.loads(text)).master.acls
    assert acls.permissive is False
    assert acls.configured
    assert acls.rules["register_frameworks"] == (Rule(frozenset({"etl"}), frozenset({"batch"}), True),)
    assert acls.rules["run_tasks"] == (
        Rule(frozenset({"etl"}), frozenset({"etl", "nobody"}), True),
        Rule(None, frozenset({"root"}), False),
    )
    assert acls.allows("register_frameworks", "etl", "batch")
    assert not acls.allows("register_frameworks", "etl", "prod")
    assert not acls.allows("register_frameworks", "web", "batch")
    assert acls.allows("run_tasks", "etl", "nobody")
    assert not acls.allows("run_tasks", "etl", "root")
    assert not acls.allows("run_tasks", None, "root")


def test_parse_every_action_with_its_object_key() -> None:
    table: dict[str, Any] = {
        "register_frameworks": [{"principals": ["a"], "roles": "*"}],
        "run_tasks": [{"principals": ["a"], "users": ["u"]}],
        "register_agents": [{"principals": ["agent"]}],
        "teardown_frameworks": [{"principals": ["op"], "framework_principals": ["a"]}],
        "kill_tasks": [{"principals": ["op"], "framework_principals": "*"}],
        "drain_agents": [{"principals": ["op"]}],
        "view_frameworks": [{"principals": "*", "users": ["u"], "allow": False}],
        "view_cluster": [{"principals": ["op"], "allow": True}],
    }
    acls = parse(table)
    assert set(acls.rules) == set(ACTIONS)
    assert acls.allows("kill_tasks", "op", "anyone") and not acls.allows("kill_tasks", "a", "a")
    assert acls.allows("drain_agents", "op") and not acls.allows("drain_agents", "a")
    assert acls.permissive is None
    assert acls.rules["register_frameworks"] == (Rule(frozenset({"a"}), None),)
    assert acls.rules["register_agents"] == (Rule(frozenset({"agent"}), None),)
    assert acls.rules["teardown_frameworks"] == (Rule(frozenset({"op"}), frozenset({"a"})),)
    assert acls.rules["view_frameworks"] == (Rule(None, frozenset({"u"}), False),)
    assert acls.allows("teardown_frameworks", "op", "a")
    assert not acls.allows("teardown_frameworks", "op", "b")


def test_no_table_and_an_empty_table_are_alike_and_not_configured() -> None:
    assert from_dict({}).master.acls == Acls()
    tables: list[dict[str, Any]] = [{}, {"run_tasks": []}, {"permissive": True}]
    for table in tables:
        assert not parse(table).configured
    assert parse({"permissive": True}).permissive is True
    assert parse({"register_agents": [{"principals": ["a"]}]}).configured


def test_parse_returns_parsed_acls_as_they_are() -> None:
    acls = parse({"register_agents": [{"principals": ["a"]}]})
    assert parse(acls) is acls


# -- parse: bad shapes, each naming its key ----------------------------------------

BAD: list[tuple[Any, str, str]] = [
    # (table, the key the error names after "master.acls", words of the problem)
    ([], "", "expected a table, got list"),
    ("deny", "", "expected a table, got str"),
    (
        {"read_secrets": []},
        ".read_secrets",
        "unknown action (known keys here: permissive, register_frameworks",
    ),
    ({"run_tasks": {"principals": "*", "users": "*"}}, ".run_tasks", "expected a list of rules"),
    ({"run_tasks": "*"}, ".run_tasks", "[[master.acls.run_tasks]] tables"),
    ({"run_tasks": [1]}, ".run_tasks[0]", "expected a table, got 1"),
    ({"run_tasks": [{"principals": "*", "users": "*"}, "x"]}, ".run_tasks[1]", "expected a table"),
    (
        {"run_tasks": [{"principals": "*", "users": "*", "roles": ["x"]}]},
        ".run_tasks[0].roles",
        "unknown key (known keys here: allow, principals, users)",
    ),
    (
        {"register_agents": [{"principals": ["a"], "users": "*"}]},
        ".register_agents[0].users",
        "unknown key (known keys here: allow, principals)",
    ),
    ({"run_tasks": [{"users": ["u"]}]}, ".run_tasks[0].principals", 'is required (a list of names, or "*"'),
    ({"register_agents": [{}]}, ".register_agents[0].principals", "is required"),
    (
        {"run_tasks": [{"principals": "*"}]},
        ".run_tasks[0].users",
        'is required (a list of names, or "*" for any)',
    ),
    ({"register_frameworks": [{"principals": ["a"]}]}, ".register_frameworks[0].roles", "is required"),
    (
        {"teardown_frameworks": [{"principals": ["a"]}]},
        ".teardown_frameworks[0].framework_principals",
        "is required",
    ),
    ({"run_tasks": [{"principals": "etl", "users": "*"}]}, ".run_tasks[0].principals", "got 'etl'"),
    ({"run_tasks": [{"principals": [""], "users": "*"}]}, ".run_tasks[0].principals", "non-empty names"),
    ({"run_tasks": [{"principals": [1], "users": "*"}]}, ".run_tasks[0].principals", "got [1]"),
    ({"run_tasks": [{"principals": "*", "users": "root"}]}, ".run_tasks[0].users", "got 'root'"),
    (
        {"run_tasks": [{"principals": "*", "users": "*", "allow": "no"}]},
        ".run_tasks[0].allow",
        "expected true or false, got 'no'",
    ),
    (
        {"view_cluster": [{"principals": "*", "allow": 0}]},
        ".view_cluster[0].allow",
        "expected true or false, got 0",
    ),
    ({"permissive": 1}, ".permissive", "expected true or false, got 1"),
    ({"permissive": "false"}, ".permissive", "expected true or false, got 'false'"),
]


@pytest.mark.parametrize(("table", "key", "problem"), BAD)
def test_parse_names_the_key_of_a_bad_shape(table: Any, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(table)
    assert caught.value.key == "master.acls" + key
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"master.acls{key}: ")


@pytest.mark.parametrize(("table", "key", "problem"), BAD)
def test_the_configuration_names_the_same_dotted_key(table: Any, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_dict({"master": {"acls": table}})
    assert caught.value.key == "master.acls" + key
    assert problem in caught.value.problem


def test_a_toml_file_with_a_bad_rule_names_the_rule() -> None:
    text = """
    [[master.acls.run_tasks]]
    principals = "*"
    users = ["root"]
    allow = false

    [[master.acls.run_tasks]]
    principals = ["etl"]
    """
    with pytest.raises(ConfigError) as caught:
        from_dict(tomllib.loads(text))
    assert caught.value.key == "master.acls.run_tasks[1].users"


def test_the_default_role_quoted_in_a_list_means_only_that_role() -> None:
    # docs/configuration.md: '"*" is the default role's name too: quote it inside a list,
    # roles = ["*"], to mean only that role', while roles = "*" means every role.
    acls = parse({"permissive": False, "register_frameworks": [{"principals": ["etl"], "roles": ["*"]}]})
    assert acls.rules["register_frameworks"] == (Rule(frozenset({"etl"}), frozenset({"*"})),)
    assert acls.allows("register_frameworks", "etl", "*")
    assert not acls.allows("register_frameworks", "etl", "batch")
    every = parse({"permissive": False, "register_frameworks": [{"principals": ["etl"], "roles": "*"}]})
    assert every.allows("register_frameworks", "etl", "batch")


def test_star_inside_a_principals_list_is_a_plain_name_not_anyone() -> None:
    acls = parse({"permissive": False, "run_tasks": [{"principals": ["ops", "*"], "users": ["*", "etl"]}]})
    assert acls.rules["run_tasks"] == (Rule(frozenset({"ops", "*"}), frozenset({"*", "etl"})),)
    assert acls.allows("run_tasks", "ops", "etl")
    assert not acls.allows("run_tasks", "web", "etl")
    assert not acls.allows("run_tasks", None, "etl")  # not a caller without a certificate
    assert not acls.allows("run_tasks", "ops", "root")


# -- first match decides ---------------------------------------------------------------


def test_a_deny_rule_before_an_allow_rule_refuses() -> None:
    acls = parse(
        {
            "permissive": True,
            "run_tasks": [
                {"principals": "*", "users": ["root"], "allow": False},
                {"principals": "*", "users": "*"},
            ],
        }
    )
    assert not acls.allows("run_tasks", "etl", "root")
    assert not acls.allows("run_tasks", None, "root")
    assert acls.allows("run_tasks", "etl", "etl")


def test_an_allow_rule_before_a_deny_rule_allows() -> None:
    acls = parse(
        {
            "permissive": False,
            "run_tasks": [
                {"principals": ["ops"], "users": ["root"]},
                {"principals": "*", "users": ["root"], "allow": False},
                {"principals": "*", "users": "*"},
            ],
        }
    )
    assert acls.allows("run_tasks", "ops", "root")
    assert not acls.allows("run_tasks", "etl", "root")
    assert acls.allows("run_tasks", "etl", "etl")


def test_a_rule_naming_other_principals_or_objects_does_not_decide() -> None:
    acls = parse({"register_frameworks": [{"principals": ["etl"], "roles": ["batch"], "allow": False}]})
    assert not acls.for_tls(True).allows("register_frameworks", "etl", "batch")
    assert acls.for_tls(True).allows("register_frameworks", "etl", "prod") is False  # permissive decides
    assert acls.for_tls(False).allows("register_frameworks", "etl", "prod") is True
    assert acls.for_tls(False).allows("register_frameworks", "web", "batch") is True


def test_star_principals_match_a_caller_without_a_certificate_and_names_do_not() -> None:
    acls = parse(
        {
            "permissive": False,
            "register_agents": [{"principals": ["agent"]}],
            "view_cluster": [{"principals": "*"}],
        }
    )
    assert acls.allows("register_agents", "agent")
    assert not acls.allows("register_agents", None)
    assert acls.allows("view_cluster", None)
    assert acls.allows("view_cluster", "anyone")


def test_an_action_without_rules_gets_permissive() -> None:
    acls = parse({"register_agents": [{"principals": ["agent"]}]})
    assert acls.for_tls(True).allows("run_tasks", "agent", "root") is False
    assert acls.for_tls(False).allows("run_tasks", "agent", "root") is True
    assert PERMISSIVE.allows("register_frameworks", None, "*")


# -- permissive ------------------------------------------------------------------------


def test_permissive_left_out_is_deny_under_tls_and_allow_without() -> None:
    acls = parse({"register_agents": [{"principals": ["agent"]}]})
    assert acls.permissive is None
    assert acls.for_tls(True).permissive is False
    assert acls.for_tls(False).permissive is True
    assert acls.for_tls(True).rules == acls.rules
    assert Acls().for_tls(True) == Acls(permissive=False)


@pytest.mark.parametrize("permissive", [True, False])
@pytest.mark.parametrize("tls", [True, False])
def test_an_explicit_permissive_is_kept(permissive: bool, tls: bool) -> None:
    acls = parse({"permissive": permissive})
    decided = acls.for_tls(tls)
    assert decided.permissive is permissive
    assert decided.allows("register_agents", "anyone") is permissive


# -- views -----------------------------------------------------------------------------

VIEWS = {
    "permissive": False,
    "view_frameworks": [
        {"principals": ["op"], "users": "*"},
        {"principals": ["etl", "etl-2"], "users": ["root"], "allow": False},
        {"principals": ["etl", "etl-2"], "users": ["etl", "nobody"]},
    ],
    "view_cluster": [{"principals": ["op"]}],
}


def test_the_operator_sees_everything() -> None:
    view = parse(VIEWS).view_of("op")
    assert view == FULL_VIEW
    assert view.everything and view.frameworks is None
    assert view.sees_user("anyone")


def test_a_principal_sees_the_frameworks_of_some_users_and_not_the_cluster() -> None:
    acls = parse(VIEWS)
    view = acls.view_of("etl")
    assert not view.cluster and not view.everything
    assert view.frameworks is not None and len(view.frameworks) == 2
    assert view.sees_user("etl") and view.sees_user("nobody")
    assert not view.sees_user("root")  # the deny rule
    assert not view.sees_user("web")  # no rule: permissive
    assert acls.allows("view_frameworks", "etl", "etl")
    assert not acls.allows("view_cluster", "etl")


def test_a_deny_rule_then_star_allow_sees_all_but_the_denied() -> None:
    acls = parse(
        {
            "permissive": False,
            "view_frameworks": [
                {"principals": ["auditor"], "users": ["root"], "allow": False},
                {"principals": ["auditor"], "users": "*"},
            ],
        }
    )
    view = acls.view_of("auditor")
    assert view.frameworks is not None
    assert not view.sees_user("root") and view.sees_user("etl")


def test_allow_rules_then_a_permissive_default_see_every_framework() -> None:
    acls = parse({"permissive": True, "view_frameworks": [{"principals": ["etl"], "users": ["etl"]}]})
    assert acls.view_of("etl") == FULL_VIEW


def test_a_principal_without_rules_under_deny_by_default_sees_nothing() -> None:
    acls = parse(VIEWS).for_tls(True)
    view = acls.view_of("web")
    assert view == View(cluster=False, frameworks=(), permissive=False)
    assert not view.sees_user("web") and not view.sees_user("etl")
    assert not acls.view_of(None).sees_user("etl")


def test_without_rules_and_without_tls_everyone_sees_everything() -> None:
    assert Acls().for_tls(False).view_of(None) == FULL_VIEW
    assert Acls().for_tls(False).view_of("x").everything


def test_equal_views_are_equal_keys() -> None:
    acls = parse(VIEWS)
    etl, etl2 = acls.view_of("etl"), acls.view_of("etl-2")
    assert etl == etl2 and hash(etl) == hash(etl2)
    assert acls.view_of("op") == parse({"permissive": True}).view_of("anyone") == FULL_VIEW
    web = acls.view_of("web")
    snapshots = {etl: "etl's", acls.view_of("op"): "all", web: "none"}
    assert snapshots[etl2] == "etl's"
    assert snapshots[FULL_VIEW] == "all"
    assert snapshots[acls.view_of("someone-else")] == "none"
    assert len(snapshots) == 3


# -- single_tenant and to_toml -----------------------------------------------------------


def test_single_tenant_round_trips_through_toml_and_decides() -> None:
    table = single_tenant(agents=["agent"], operators=["operator"], frameworks=["etl", "web"])
    text = to_toml(table)
    parsed = tomllib.loads(text)
    assert parsed == {"master": {"acls": table}}
    acls = from_dict(parsed).master.acls.for_tls(True)
    assert acls.allows("register_agents", "agent")
    assert not acls.allows("register_agents", "etl")
    assert acls.allows("register_frameworks", "etl", "any-role")
    assert acls.allows("register_frameworks", "operator", "*")
    assert not acls.allows("register_frameworks", "agent", "*")
    assert acls.allows("run_tasks", "web", "root")
    assert not acls.allows("run_tasks", "stranger", "nobody")
    assert acls.allows("teardown_frameworks", "operator", "etl")
    assert not acls.allows("teardown_frameworks", "etl", "web")
    assert acls.view_of("operator") == FULL_VIEW
    assert acls.view_of("etl") == View(False, (), False)


def test_single_tenant_with_any_framework_principal() -> None:
    table = single_tenant(agents=["agent"], operators=["operator"])
    acls = parse(tomllib.loads(to_toml(table))["master"]["acls"])
    assert acls.permissive is False
    assert acls.allows("register_frameworks", "whoever", "batch")
    assert acls.allows("run_tasks", None, "nobody")
    assert not acls.allows("view_cluster", "whoever")


def test_to_toml_under_another_key() -> None:
    table = {"permissive": True, "run_tasks": [{"principals": "*", "users": ["root"], "allow": False}]}
    parsed = tomllib.loads(to_toml(table, key="acls"))
    assert parsed == {"acls": table}


def test_to_toml_round_trips_names_outside_the_basic_multilingual_plane() -> None:
    # A principal is a certificate's common name, any Unicode text. Written with JSON's
    # escapes, "\U0001F600" became the surrogate pair "\ud83d\ude00", which TOML refuses
    # (an escape must be a Unicode scalar value): the file did not load.
    table = {"run_tasks": [{"principals": ["t\U0001f600m"], "users": ["etl"]}]}
    assert tomllib.loads(to_toml(table)) == {"master": {"acls": table}}


# -- properties ------------------------------------------------------------------------

PRINCIPALS = ["a", "b", "*"]
OBJECTS = ["u", "v", "*"]


def names(pool: list[str]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(ANY), st.lists(st.sampled_from(pool), max_size=3, unique=True))


@st.composite
def rule_tables(draw: st.DrawFn) -> dict[str, Any]:
    table: dict[str, Any] = {}
    permissive = draw(st.sampled_from([None, True, False]))
    if permissive is not None:
        table["permissive"] = permissive
    for action, key in ACTIONS.items():
        rules: list[dict[str, Any]] = []
        for _ in range(draw(st.integers(0, 4))):
            rule: dict[str, Any] = {"principals": draw(names(PRINCIPALS))}
            if key is not None:
                rule[key] = draw(names(OBJECTS))
            allow = draw(st.sampled_from([None, True, False]))
            if allow is not None:
                rule["allow"] = allow
            rules.append(rule)
        keep_empty = draw(st.booleans())  # an action with an empty list of rules
        if rules or keep_empty:
            table[action] = rules
    return table


def reference_allows(
    table: dict[str, Any], tls: bool, action: str, principal: str | None, obj: str | None
) -> bool:
    """The contract, spelled out on the raw table."""
    key = ACTIONS[action]
    for rule in table.get(action, []):
        who = rule["principals"]
        if who != "*" and principal not in who:
            continue
        if key is not None and rule[key] != "*" and obj not in rule[key]:
            continue
        return rule.get("allow", True)
    return table.get("permissive", not tls)


WHO = [None, *PRINCIPALS, "d"]
WHAT = [*OBJECTS, "x"]


@settings(max_examples=150, deadline=None)
@given(table=rule_tables(), tls=st.booleans())
def test_allows_is_the_reference_and_views_agree_with_it(table: dict[str, Any], tls: bool) -> None:
    acls = parse(table).for_tls(tls)
    for action, key in ACTIONS.items():
        for principal in WHO:
            for obj in WHAT if key is not None else [None]:
                assert acls.allows(action, principal, obj) == reference_allows(
                    table, tls, action, principal, obj
                ), (
                    action,
                    principal,
                    obj,
                )
    for principal in WHO:
        view = acls.view_of(principal)
        assert view.cluster == acls.allows("view_cluster", principal)
        for user in WHAT:
            assert view.sees_user(user) == acls.allows("view_frameworks", principal, user), (principal, user)
    # Principals named by exactly the same rules ("d" and None only by ANY rules) get
    # equal views: they share one rendered snapshot.
    assert len({acls.view_of("d"), acls.view_of(None), acls.view_of("not-named-anywhere")}) == 1


@settings(max_examples=60, deadline=None)
@given(table=rule_tables())
def test_to_toml_round_trips_any_rule_table(table: dict[str, Any]) -> None:
    parsed = tomllib.loads(to_toml(table))
    assert parsed == {"master": {"acls": table}}
    assert parse(parsed["master"]["acls"]) == parse(table)


NAMES = st.text(min_size=1, max_size=8)


@settings(max_examples=100, deadline=None)
@given(
    principals=st.lists(NAMES, min_size=1, max_size=3),
    users=st.lists(NAMES, min_size=1, max_size=3),
)
def test_to_toml_round_trips_any_names(principals: list[str], users: list[str]) -> None:
    # Quotes, backslashes, control characters, anything outside the BMP: a principal is
    # a certificate's common name, any Unicode text.
    table = {"permissive": False, "run_tasks": [{"principals": principals, "users": users, "allow": True}]}
    parsed = tomllib.loads(to_toml(table))
    assert parsed == {"master": {"acls": table}}
    acls = parse(parsed["master"]["acls"])
    assert all(acls.allows("run_tasks", p, u) for p in principals for u in users)
