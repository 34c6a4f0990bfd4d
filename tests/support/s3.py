"""A plain HTTP PUT to the tests' S3 server, signed with AWS Signature V4 (standard library
only), so a test can send exactly the headers it means to (``If-None-Match: *``)."""

from __future__ import annotations

import hashlib
import hmac
import urllib.error
import urllib.request
from datetime import UTC, datetime
from urllib.parse import quote

from spark_groups.tools.s3_server import REGION, S3Server


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def put_object(
    server: S3Server, bucket: str, key: str, body: bytes, headers: dict[str, str] | None = None
) -> int:
    """PUT ``body`` at ``bucket/key`` (path style) with extra ``headers``; the HTTP status."""
    now = datetime.now(UTC)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    host = server.endpoint.removeprefix("http://")
    path = f"/{bucket}/{quote(key)}"
    payload = hashlib.sha256(body).hexdigest()
    signed = {
        "host": host,
        "x-amz-content-sha256": payload,
        "x-amz-date": amz_date,
        **{k.lower(): v for k, v in (headers or {}).items()},
    }
    names = sorted(signed)
    canonical = "\n".join(
        [
            "PUT",
            path,
            "",
            "".join(f"{n}:{signed[n].strip()}\n" for n in names),
            ";".join(names),
            payload,
        ]
    )
    scope = f"{day}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key_bytes = _hmac(("AWS4" + server.secret_key).encode(), day)
    for part in (REGION, "s3", "aws4_request"):
        key_bytes = _hmac(key_bytes, part)
    signature = hmac.new(key_bytes, to_sign.encode(), hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        server.endpoint + path,
        data=body,
        method="PUT",
        headers={
            **{n: signed[n] for n in names if n != "host"},
            # urllib's default for a body is a form, which the server would parse as one
            "Content-Type": "application/octet-stream",
            "Authorization": (
                f"AWS4-HMAC-SHA256 Credential={server.access_key}/{scope}, "
                f"SignedHeaders={';'.join(names)}, Signature={signature}"
            ),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
