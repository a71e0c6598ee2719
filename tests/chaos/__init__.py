"""The chaos suite (``make chaos``, docs/reliability.md): the whole stack under a steady
placement load, one fault after another, and a count of what each lost or duplicated.

    stack.py      servers and services on the suite's own ports (ChaosPorts)
    load.py       the placement load and its ledger of answers
    audit.py      counts from the topics, Postgres and /metrics
    parity.py     scores against the reference implementation
    context.py    the plan (full or short) and the end of every scenario: recover, audit
    faults.py     Kafka / Postgres stopped, scorer / replica kill -9
    hostile.py    malformed records on every consumed topic, schemathesis
    bodies.py     1 GB and trickling HTTP bodies against one replica
    telemetry.py  node samples that lie (forged, colliding, replayed, a flood): one pass
    telemetry_rows.py  its four rows
    sustained.py  long load, RSS slopes
    partition.py  an agent cut from the broker (network namespace) and healed
    relay.py      the TCP relay the partition needs
    disk.py       the scorer's changelogs on a full disk
    logdirs.py    puts them alone on the small filesystem (MoveToLogDir.java)
    suite.py      the scenarios in order; __main__.py the command line
"""
