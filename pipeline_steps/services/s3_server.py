"""The production profile's S3 stand-in: moto's server, checking a request's signature over
every header its client signed, as S3 does.

moto recomputes a SigV4 signature with botocore's signer, which leaves out the headers botocore
never signs itself (``User-Agent`` among them). The AWS SDK for Java, under Hadoop's ``s3a://``
connector that the Spark engine's executors read the lake through, signs ``User-Agent``, and
moto would refuse every one of its requests. moto rebuilds a request from the headers the
client named as signed and no others, so no header is signed here that the client did not sign.

``python -m pipeline_steps.services.s3_server -H HOST -p PORT`` takes moto_server's arguments;
:func:`serving` runs one for a block (the cluster test, the cluster benchmark).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def sign_as_the_client_did() -> None:
    """Let botocore's signer, in this process, sign ``User-Agent`` where a client signed it."""
    import botocore.auth

    while "user-agent" in botocore.auth.SIGNED_HEADERS_BLACKLIST:
        botocore.auth.SIGNED_HEADERS_BLACKLIST.remove("user-agent")


def main(argv: list[str] | None = None) -> int:
    from moto.server import main as moto_main

    sign_as_the_client_did()
    moto_main(sys.argv[1:] if argv is None else argv)
    return 0


@contextmanager
def serving(log: Path, bucket: str, user: str = "lake") -> Iterator[dict[str, str]]:
    """This server on a free local port while the block runs (its output appended to ``log``),
    with one IAM user allowed everything and ``bucket`` created: the user's ``AWS_*``
    variables. Requests without a signature are refused once the user exists."""
    import boto3

    from pipeline_steps.services.lifecycle import create_s3_user
    from pipeline_steps.services.ports import free_port

    port = free_port()
    with log.open("ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", __name__, "-H", "127.0.0.1", "-p", str(port)],
            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the S3 server on port {port} did not start; see {log}")
            time.sleep(0.5)
        endpoint = f"http://127.0.0.1:{port}"
        key_id, secret = create_s3_user(endpoint, user)
        env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": key_id,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
        ).create_bucket(Bucket=bucket)
        yield env
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


if __name__ == "__main__":
    sys.exit(main())
