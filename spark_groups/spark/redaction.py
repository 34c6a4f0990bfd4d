"""Options Spark shows redacted: the schema registry's basic-auth credentials too.

Spark redacts an option in plans (``explain``, the UI, the event log) when its name matches
``spark.sql.redaction.options.regex`` (default ``(?i)url``) or its name or value matches
``spark.redaction.regex`` (passwords, secrets, tokens). ``schema.registry.basic.auth.user.info``
(``user:password``) matches neither, so :func:`redact_registry_credentials` adds
:data:`CREDENTIAL_OPTIONS` to the session's options regex; ``register()`` calls it.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

#: Spark's SQL setting: which option names are redacted in plans.
OPTIONS_REGEX = "spark.sql.redaction.options.regex"
#: Its default in Spark 4.
DEFAULT_OPTIONS_REGEX = "(?i)url"
#: The option names added to it (Java regex, case-insensitive).
CREDENTIAL_OPTIONS = r"(?i:basic\.auth\.user\.info|user\.info)"


def redact_registry_credentials(spark: Any) -> None:
    """Make ``spark`` (a classic or a Connect session) redact :data:`CREDENTIAL_OPTIONS` in
    its plans, keeping what its regex matched already; a session that refuses the setting is
    told at WARNING how to set it."""
    try:
        current = spark.conf.get(OPTIONS_REGEX, DEFAULT_OPTIONS_REGEX) or DEFAULT_OPTIONS_REGEX
        if CREDENTIAL_OPTIONS not in current:
            spark.conf.set(OPTIONS_REGEX, f"{current}|{CREDENTIAL_OPTIONS}")
    except Exception as exc:  # a managed session may refuse it
        log.warning(
            "could not add the schema registry's credential options to %s (%s): set it to "
            "'%s|%s' to keep schema.registry.basic.auth.user.info out of query plans",
            OPTIONS_REGEX, exc, DEFAULT_OPTIONS_REGEX, CREDENTIAL_OPTIONS,
        )  # fmt: skip
