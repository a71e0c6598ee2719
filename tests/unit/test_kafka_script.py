"""scripts/kafka.sh finds the broker's jars: KAFKA_HOME laid out as Apache's binary
release, else Apache's release fetched and checked where Maven is absent, else one line
saying what to install (no broker is started here: ``kafka.sh libs`` stops there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kafka_release import (
    apache_sha512,
    fake_jars,
    kafka_sh,
    lay_out_release,
    mirror,
    path_without,
    release_tarball,
)
from tests.processes import free_port

VERSION = "3.9.1"
RELEASE = f"kafka_2.13-{VERSION}"


def publish_release(site: Path, *, tampered: bool = False) -> None:
    """``site`` laid out as Apache's kafka/ directory, with this version's release."""
    (site / VERSION).mkdir(parents=True)
    tarball = release_tarball(VERSION, fake_jars(VERSION))
    (site / VERSION / f"{RELEASE}.tgz").write_bytes(tarball + (b"tampered" if tampered else b""))
    (site / VERSION / f"{RELEASE}.tgz.sha512").write_text(apache_sha512(f"{RELEASE}.tgz", tarball))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An empty cache and state, nothing listening on the mirror, and no Maven."""
    return {
        "FAIRLANE_CACHE_DIR": str(tmp_path / "cache"),
        "FAIRLANE_STATE_DIR": str(tmp_path / "state"),
        "KAFKA_PORT": str(free_port()),
        "KAFKA_VERSION": VERSION,
        "KAFKA_MIRROR": f"http://127.0.0.1:{free_port()}/kafka",
        "KAFKA_HOME": "",
        "PATH": path_without("mvn", tmp_path / "bin"),
    }


def test_kafka_home_laid_out_as_a_release_gives_its_libs_and_its_version(
    tmp_path: Path, env: dict[str, str]
) -> None:
    home = lay_out_release(tmp_path / "kafka_2.13-3.8.1", "3.8.1", fake_jars("3.8.1"))
    done = kafka_sh("libs", env={**env, "KAFKA_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{home}/libs\n"
    assert done.stderr == f"kafka.sh: Kafka 3.8.1 from KAFKA_HOME={home}\n"


def test_kafka_home_that_is_not_a_release_is_one_line(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "not-kafka" / "bin").mkdir(parents=True)
    done = kafka_sh("up", env={**env, "KAFKA_HOME": str(tmp_path / "not-kafka")})
    assert done.returncode == 1
    assert done.stderr == (
        f"kafka.sh: KAFKA_HOME={tmp_path}/not-kafka is not an unpacked Kafka release "
        "(no libs/kafka_2.13-<version>.jar)\n"
    )


@pytest.mark.parametrize("command", ["libs", "up"])
def test_without_maven_kafka_home_or_network_one_line_says_what_to_install(
    command: str, env: dict[str, str]
) -> None:
    done = kafka_sh(command, env=env, timeout_s=60)
    assert done.returncode == 1
    assert (done.stdout, done.stderr.count("\n")) == ("", 1)
    assert done.stderr == (
        f"kafka.sh: cannot get Kafka {VERSION}: no Maven, no KAFKA_HOME, and no Apache mirror "
        f"answered ({env['KAFKA_MIRROR']}); install Maven (Debian: apt-get install maven) "
        f"or set KAFKA_HOME to an unpacked {RELEASE}.tgz\n"
    )
    assert not (Path(env["FAIRLANE_CACHE_DIR"]) / f"kafka-{VERSION}" / "libs").exists()


def test_without_maven_apaches_release_is_fetched_checked_and_cached(
    tmp_path: Path, env: dict[str, str]
) -> None:
    publish_release(tmp_path / "site")
    dead = env["KAFKA_MIRROR"]
    with mirror(tmp_path / "site") as live:
        # The first mirror is down (as Apache's download site is for old versions); the next has it.
        done = kafka_sh("libs", env={**env, "KAFKA_MIRROR": f"{dead} {live}"})
    assert done.returncode == 0, done.stderr
    libs = Path(env["FAIRLANE_CACHE_DIR"]) / f"kafka-{VERSION}" / "libs"
    assert done.stdout == f"{libs}\n"
    assert f"downloading Apache's binary release {live}/{VERSION}/{RELEASE}.tgz" in done.stderr
    assert sorted(p.name for p in libs.iterdir()) == sorted(fake_jars(VERSION))
    assert [p.name for p in libs.parent.iterdir()] == ["libs"]  # no leftovers
    again = kafka_sh("libs", env=env)  # cached: no mirror needed any more
    assert (again.returncode, again.stdout, again.stderr) == (0, f"{libs}\n", "")


def test_a_release_that_does_not_match_its_sha512_is_not_used(
    tmp_path: Path, env: dict[str, str]
) -> None:
    publish_release(tmp_path / "site", tampered=True)
    with mirror(tmp_path / "site") as live:
        done = kafka_sh("libs", env={**env, "KAFKA_MIRROR": live})
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"kafka.sh: {live}/{VERSION}/{RELEASE}.tgz does not match its published SHA-512; not used"
    )
    assert not (Path(env["FAIRLANE_CACHE_DIR"]) / f"kafka-{VERSION}" / "libs").exists()
