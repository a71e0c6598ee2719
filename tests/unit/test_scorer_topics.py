"""The scorer creates its own topics under the names Faust will use for them."""

from pathlib import Path

from fairlane_events.topics import STREAM_PARTITIONS
from fairlane_scorer.app import create_app, scorer_topics, speed_input_topic
from fairlane_scorer.settings import ScorerSettings
from tests.node_keys import TEST_KEY_RING


def test_scorer_topics_are_the_apps_changelogs_and_internal_topics(tmp_path: Path) -> None:
    settings = ScorerSettings(
        app_id="scorer-t", data_dir=tmp_path, sample_key_ring_file=TEST_KEY_RING
    )
    app = create_app(settings)
    changelogs = {t.changelog_topic.get_topic_name(): t.partitions for t in app.tables.values()}
    specs = {spec.name: spec.partitions for spec in scorer_topics("scorer-t")}
    assert set(changelogs) == set(specs) - {"scorer-t-placements-by-node", "scorer-t-speed-input"}
    for name, partitions in changelogs.items():  # each as its table is partitioned
        assert specs[name] == partitions, name
    assert specs["scorer-t-placements-by-node"] == STREAM_PARTITIONS
    assert specs[speed_input_topic("scorer-t")] == 1  # the learner's state is one partition


def test_without_the_speed_learner_its_tables_are_not_made(tmp_path: Path) -> None:
    settings = ScorerSettings(
        app_id="scorer-t", data_dir=tmp_path, learn_speeds=False, sample_key_ring_file=TEST_KEY_RING
    )
    app = create_app(settings)
    assert set(app.tables) == {"node-windows", "node-allocations"}
