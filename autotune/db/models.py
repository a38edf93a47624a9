"""ORM models: the schema version, the best verified config per key, and every search trial."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import Boolean, DateTime, Dialect, Float, Index, Integer, String, Text, TypeDecorator, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SCHEMA_VERSION = 3
"""Bump on any change to the tables below; a database with another version is refused on open, unless
autotune.db.migrations can upgrade it (version 1: best_configs without the verification columns; version 2:
without `timing`)."""


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime, stored naive in UTC (SQLite keeps no offset)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"datetime {value} has no timezone; pass an aware one")
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=timezone.utc)


class Base(DeclarativeBase):
    pass


class SchemaInfo(Base):
    """The single row naming the schema version of this database."""

    __tablename__ = "schema_info"

    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


class BestConfig(Base):
    """The fastest verified config for one (kernel, source hash, GPU, dtype, shape bucket)."""

    __tablename__ = "best_configs"
    __table_args__ = (
        UniqueConstraint("kernel", "source_hash", "gpu", "dtype", "bucket", name="uq_best_configs_key"),
        Index("ix_best_configs_kernel_gpu_dtype", "kernel", "gpu", "dtype"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kernel: Mapped[str] = mapped_column(String(128))
    source_hash: Mapped[str] = mapped_column(String(128))
    gpu: Mapped[str] = mapped_column(String(64))
    device_name: Mapped[str] = mapped_column(String(256))
    dtype: Mapped[str] = mapped_column(String(16))
    bucket: Mapped[str] = mapped_column(String(256))
    config_json: Mapped[str] = mapped_column("config", Text)
    problem_json: Mapped[str] = mapped_column("problem", Text)
    time_ms: Mapped[float] = mapped_column(Float)
    default_time_ms: Mapped[float | None] = mapped_column(Float)
    baseline_time_ms: Mapped[float | None] = mapped_column(Float)
    timing: Mapped[str | None] = mapped_column(String(16))  # how time_ms was taken (store.TIMINGS); NULL: not recorded
    examples_verified: Mapped[int] = mapped_column(Integer)
    triton_version: Mapped[str] = mapped_column(String(64))
    torch_version: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The latest re-verification (`autotune db verify`); all NULL until there is one. A row that failed
    # it is flagged: the runtime no longer serves it.
    verified_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    verify_seed: Mapped[int | None] = mapped_column(Integer)
    verify_examples: Mapped[int | None] = mapped_column(Integer)
    verify_passed: Mapped[bool | None] = mapped_column(Boolean)
    verify_failure_json: Mapped[str | None] = mapped_column("verify_failure", Text)


class TrialRecord(Base):
    """One trial of a search study: the config tried and what happened to it."""

    __tablename__ = "trials"
    __table_args__ = (
        Index("ix_trials_study_number", "study", "number"),
        Index("ix_trials_kernel_gpu_dtype", "kernel", "gpu", "dtype"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    study: Mapped[str] = mapped_column(String(256))
    kernel: Mapped[str] = mapped_column(String(128))
    source_hash: Mapped[str] = mapped_column(String(128))
    gpu: Mapped[str] = mapped_column(String(64))
    dtype: Mapped[str] = mapped_column(String(16))
    bucket: Mapped[str] = mapped_column(String(256))
    number: Mapped[int] = mapped_column(Integer)
    config_json: Mapped[str] = mapped_column("config", Text)
    outcome: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(Text)
    time_ms: Mapped[float | None] = mapped_column(Float)
    failing_example_json: Mapped[str | None] = mapped_column("failing_example", Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
