"""librdkafka's auth failures as typed errors (no broker; the real ones: test_sasl_acl.py)."""

from __future__ import annotations

import pickle

from confluent_kafka import KafkaError

from spark_groups.errors import AuthenticationError, AuthorizationError, SparkGroupsError
from spark_groups.kafka import auth

PASSWORD = "pw-never-shown-9c1"
CONFIG = {
    "bootstrap.servers": "b1:9093,b2:9093",
    "group.id": "etl",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "al",
    "sasl.password": PASSWORD,
}


def test_refused_credentials_name_user_mechanism_and_servers_never_the_password() -> None:
    err = KafkaError(KafkaError._AUTHENTICATION, f"SASL authentication error (echo {PASSWORD})")
    error = auth.classify(err, CONFIG)
    assert isinstance(error, AuthenticationError)
    assert isinstance(error, SparkGroupsError)
    assert (error.username, error.mechanism, error.servers) == (
        "al",
        "SCRAM-SHA-512",
        "b1:9093,b2:9093",
    )
    # The short user name is not scrubbed out of the detail; the password is.
    assert "user 'al'" in str(error) and "SASL authentication error (echo ***)" in str(error)
    assert PASSWORD not in str(error) and PASSWORD not in repr(vars(error))
    assert auth.classify(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED), CONFIG) is not None


def test_denials_name_the_topic_or_the_group_and_the_acl_to_add() -> None:
    topic = auth.classify(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), CONFIG, "orders")
    group = auth.classify(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), CONFIG, "orders")
    assert isinstance(topic, AuthorizationError) and isinstance(group, AuthorizationError)
    assert (topic.resource_type, topic.resource, topic.operation) == ("topic", "orders", "READ")
    assert (group.resource_type, group.resource, group.operation) == ("group", "etl", "READ")
    assert topic.principal == group.principal == "User:al"
    assert "--allow-principal User:al --operation READ --topic orders" in str(topic)
    assert "--operation READ --group etl" in str(group)


def test_other_errors_are_not_auth_failures() -> None:
    assert auth.classify(KafkaError(KafkaError._TRANSPORT), CONFIG) is None
    assert auth.classify(None, CONFIG) is None
    assert not auth.is_authentication_failure(KafkaError(KafkaError._ALL_BROKERS_DOWN))


def test_without_sasl_the_principal_is_unknown() -> None:
    error = auth.topic_denied("orders", {"bootstrap.servers": "b:9092"}, "denied")
    assert error.principal is None
    assert "this client may not READ topic 'orders'" in str(error)


def test_errors_survive_pickling_with_their_data() -> None:
    for error in (
        auth.classify(KafkaError(KafkaError._AUTHENTICATION, "refused"), CONFIG),
        auth.classify(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), CONFIG, "orders"),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error)
        assert vars(copy) == vars(error) and str(copy) == str(error)
