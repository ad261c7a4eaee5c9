"""The daemon commands import aiohttp without loading the system's CA bundle
(:func:`mezzo.cli.commands._import_aiohttp_without_the_system_cas`), and leave the
environment as they found it: tasks and children see the operator's own settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, os
from mezzo.cli import commands
commands._import_aiohttp_without_the_system_cas()
from aiohttp import connector
print(json.dumps({"cas": connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"],
                  "env": os.environ.get("SSL_CERT_FILE")}))
"""


@pytest.mark.parametrize("operator_setting", [None, "/etc/ssl/certs/ca-certificates.crt"])
def test_aiohttp_is_imported_without_cas_and_the_environment_is_put_back(operator_setting):
    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    if operator_setting is not None:
        env["SSL_CERT_FILE"] = operator_setting
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert seen == {"cas": 0, "env": operator_setting}


def test_a_process_that_imported_aiohttp_already_keeps_its_cas():
    if not os.path.exists("/etc/ssl/certs/ca-certificates.crt"):
        pytest.skip("needs the system's CA bundle (Debian's ca-certificates)")
    probe = "import aiohttp\n" + PROBE
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["cas"] > 0
