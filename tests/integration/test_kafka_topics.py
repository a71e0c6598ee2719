import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from fairlane_events.topics import ALL_TOPICS, TopicSpec
from fairlane_runtime.errors import ServerUnavailableError, TopicMismatchError
from fairlane_runtime.kafka import ensure_topics, kafka_admin, topic_partitions

pytestmark = pytest.mark.integration


async def test_all_topics_exist_with_their_partitions_and_configs(kafka_bootstrap: str) -> None:
    admin = await kafka_admin(kafka_bootstrap)
    try:
        counts = await topic_partitions(admin, [t.name for t in ALL_TOPICS])
        described = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "fairlane.gpu-scores.v1")]
        )
    finally:
        await admin.close()
    assert counts == {t.name: t.partitions for t in ALL_TOPICS}
    entries = {e[0]: e[1] for e in described[0].resources[0][4]}
    assert entries["cleanup.policy"] == "compact"


async def test_ensure_topics_is_idempotent_and_refuses_a_partition_mismatch(
    kafka_bootstrap: str, unique: str
) -> None:
    name = f"test.topic-{unique}"
    assert await ensure_topics(kafka_bootstrap, [TopicSpec(name, 2)]) == [name]
    assert await ensure_topics(kafka_bootstrap, [TopicSpec(name, 2)]) == []
    with pytest.raises(TopicMismatchError, match="has 2 partitions, expected 3"):
        await ensure_topics(kafka_bootstrap, [TopicSpec(name, 3)])


async def test_unreachable_broker_gives_a_clear_error() -> None:
    with pytest.raises(ServerUnavailableError, match=r"not reachable at 127.0.0.1:1 .*kafka.sh up"):
        await kafka_admin("127.0.0.1:1", timeout_s=3)
