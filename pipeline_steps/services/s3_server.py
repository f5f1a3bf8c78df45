"""The production profile's S3 stand-in: moto's server, checking a request's signature over
every header its client signed, as S3 does.

moto recomputes a SigV4 signature with botocore's signer, which leaves out the headers botocore
never signs itself (``User-Agent`` among them). The AWS SDK for Java, under Hadoop's ``s3a://``
connector that the Spark engine's executors read the lake through, signs ``User-Agent``, and
moto would refuse every one of its requests. moto rebuilds a request from the headers the
client named as signed and no others, so no header is signed here that the client did not sign.

``python -m pipeline_steps.services.s3_server -H HOST -p PORT`` takes moto_server's arguments.
"""

from __future__ import annotations

import sys


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


if __name__ == "__main__":
    sys.exit(main())
