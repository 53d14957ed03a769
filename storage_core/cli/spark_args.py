"""The flags of the commands that can run as a Spark job: the engine choice, the Spark master and its
settings, and the session they describe."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from storage_core.cli.common import key_values


def add_spark_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("spark")
    group.add_argument(
        "--spark-master",
        metavar="URL",
        help="Spark master (default: local[*]); on a cluster the executors need Tierkeeper's Python, e.g. "
        "--spark-conf spark.archives=tk.tar.gz#env --spark-conf spark.pyspark.python=./env/bin/python "
        "(docs/spark.md, On a cluster)",
    )
    add_spark_conf_arg(group, "Spark setting; repeatable")


def add_spark_conf_arg(parser: argparse.ArgumentParser | argparse._ArgumentGroup, help: str) -> None:
    """``--spark-conf KEY=VALUE`` alone: ``copy`` runs on a local session only, so it has no master."""
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help=help)


def add_engine_arg(parser: argparse.ArgumentParser, verb: str, task: str) -> None:
    """``--engine local|spark`` of a command that works partition by partition: ``verb`` the partitions in
    this process, or as Spark tasks, one per ``task``."""
    parser.add_argument(
        "--engine",
        choices=["local", "spark"],
        default="local",
        help=f"{verb} the partitions one by one in this process (default) or as tasks of a Spark job "
        f"(one per {task}; --spark-master, --spark-conf)",
    )


def spark_conf(args: argparse.Namespace) -> dict[str, str]:
    """The settings of ``--spark-conf``."""
    return key_values(args.spark_conf, "--spark-conf")


@contextmanager
def spark_from_args(args: argparse.Namespace, app: str) -> Iterator[Any]:
    """A session of ``--spark-master`` and ``--spark-conf`` for one command, stopped after it (unless the
    process already ran one: jobs/spark_session.py)."""
    from storage_core.jobs.spark_session import job_spark_session

    with job_spark_session(app, args.spark_master, spark_conf(args)) as spark:
        yield spark
