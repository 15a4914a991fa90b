"""TLS options of the wrapped C tools (redis-benchmark, memtier_benchmark), from an
environment's `tls:` settings.

Both tools check the server's certificate chain (against `ca_file`, else: redis-benchmark the
system's CAs, memtier_benchmark nothing it trusts) but not the name in it: neither checks the
host name, so `server_name` reaches them as SNI only. redis-py (every other family) checks
both. File paths appear on the command line; their contents never do."""

from __future__ import annotations

from typing import Literal

from yardstick.access.environment import Environment

ToolKind = Literal["redis-benchmark", "memtier_benchmark"]


def tls_args(env: Environment, tool: ToolKind) -> list[str]:
    """Command-line options that make `tool` speak TLS to `env` (none without rediss://)."""
    if not env.uses_tls:
        return []
    tls = env.tls
    if tool == "redis-benchmark":
        # redis-benchmark 6.0+: --tls --sni --cacert --cert --key; --insecure since 7.0.
        args = ["--tls"]
        if tls is None:
            return args
        if tls.ca_file is not None:
            args += ["--cacert", str(tls.ca_file)]
        if tls.cert_file is not None and tls.key_file is not None:
            args += ["--cert", str(tls.cert_file), "--key", str(tls.key_file)]
        if tls.server_name:
            args += ["--sni", tls.server_name]
        if not tls.verify:
            args.append("--insecure")
        return args
    # memtier_benchmark 1.3+: --tls --cacert= --cert= --key= --sni= --tls-skip-verify.
    args = ["--tls"]
    if tls is None:
        return args
    if tls.ca_file is not None:
        args.append(f"--cacert={tls.ca_file}")
    if tls.cert_file is not None and tls.key_file is not None:
        args += [f"--cert={tls.cert_file}", f"--key={tls.key_file}"]
    if tls.server_name:
        args.append(f"--sni={tls.server_name}")
    if not tls.verify:
        args.append("--tls-skip-verify")
    return args
