"""The scorer creates its own topics under the names Faust will use for them."""

from pathlib import Path

from fairlane_events.topics import STREAM_PARTITIONS
from fairlane_scorer.app import create_app, scorer_topics
from fairlane_scorer.settings import ScorerSettings


def test_scorer_topics_are_the_apps_changelogs_and_internal_topic(tmp_path: Path) -> None:
    settings = ScorerSettings(app_id="scorer-t", data_dir=tmp_path)
    app = create_app(settings)
    changelogs = {t.changelog_topic.get_topic_name() for t in app.tables.values()}
    names = {spec.name for spec in scorer_topics("scorer-t")}
    assert changelogs < names
    assert names - changelogs == {"scorer-t-placements-by-node"}
    assert {spec.partitions for spec in scorer_topics("scorer-t")} == {STREAM_PARTITIONS}
