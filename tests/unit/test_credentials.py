"""HTTP Basic credentials (mezzo.http.credentials): Mesos' credentials file, checked
with errors naming the key, and the header read to a principal or refused."""

from __future__ import annotations

import base64
import json
import re

import pytest

from mezzo.config import load as load_config
from mezzo.errors import ConfigError
from mezzo.http.credentials import BadCredentials, Credentials


def basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


@pytest.fixture
def credentials(tmp_path) -> Credentials:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps({"credentials": [{"principal": "etl", "secret": "s3cret"},
                                                {"principal": "web", "secret": "other:with:colons"}]}))
    return Credentials.load(str(path))


def test_the_header_names_the_principal_whose_secret_it_carries(credentials) -> None:
    assert credentials.principal(basic("etl:s3cret")) == "etl"
    assert credentials.principal(basic("web:other:with:colons")) == "web"  # the secret may hold ':'
    assert credentials.principal("basic " + basic("etl:s3cret").split()[1]) == "etl"


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (basic("etl:wrong"), "wrong principal or secret"),
        (basic("nobody:s3cret"), "wrong principal or secret"),
        (basic("etl"), "wrong principal or secret"),
        (basic("None:None"), "wrong principal or secret"),
        ("Basic !!!not-base64", "not base64"),
        ("Basic é", "not base64"),
        ("Bearer abc", "only Basic"),
        ("", "only Basic"),
    ],
)
def test_credentials_that_match_nobody_are_refused_saying_why(credentials, header, words) -> None:
    with pytest.raises(BadCredentials, match=re.escape(words)):
        credentials.principal(header)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("not json", "is not JSON"),
        ('["etl"]', 'expected {"credentials"'),
        ('{"credentials": {"etl": "x"}}', 'expected {"credentials"'),
        ('{"credentials": ["etl"]}', "credentials[0]: expected an object"),
        ('{"credentials": [{"principal": "", "secret": "x"}]}', "credentials[0].principal"),
        ('{"credentials": [{"principal": "a:b", "secret": "x"}]}', "without ':'"),
        ('{"credentials": [{"principal": "a", "secret": ""}]}', "credentials[0].secret"),
        ('{"credentials": [{"principal": "a", "secret": "x"}, {"principal": "a", "secret": "y"}]}', "listed twice"),
    ],
)
def test_a_bad_credentials_file_is_a_config_error_naming_the_key(tmp_path, content, words) -> None:
    path = tmp_path / "credentials.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=re.escape(words)) as caught:
        Credentials.load(str(path))
    assert caught.value.key == "master.http.credentials"


def test_the_configuration_names_the_file_and_only_the_master_reads_it(tmp_path) -> None:
    # Agents and tools may share the master's configuration file without being able to
    # read its secrets: loading a configuration does not open the credentials file.
    config = tmp_path / "mezzo.toml"
    config.write_text(f'[master.http]\ncredentials = "{tmp_path / "missing.json"}"\n')
    assert load_config(config).master.http.credentials == str(tmp_path / "missing.json")


def test_a_master_whose_credentials_cannot_be_read_says_so_in_one_line(tmp_path) -> None:
    from ..conftest import mezzo_cli, one_line_error

    config = tmp_path / "mezzo.toml"
    config.write_text(f'[master.http]\ncredentials = "{tmp_path / "missing.json"}"\n')
    r = mezzo_cli("master", "--config", str(config), "--listen", "127.0.0.1:0")
    one_line_error(r, 2, "master.http.credentials: cannot read")


def test_deep_nesting_is_a_config_error_too(tmp_path) -> None:
    path = tmp_path / "credentials.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nested too deep") as caught:
        Credentials.load(str(path))
    assert caught.value.key == "master.http.credentials"


def test_the_secrets_are_not_in_its_repr(credentials) -> None:
    assert "s3cret" not in repr(credentials) and "other" not in repr(credentials)
