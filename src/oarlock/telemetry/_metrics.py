"""The instruments: GenAI semantic-convention names where they exist, ``oarlock.*`` else.

Every instrument is made once per meter provider; recording on a meter with no SDK behind
it does nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry import metrics

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

__all__ = ["Instruments"]

# the GenAI conventions' advice for these two histograms
_TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]
_SECOND_BUCKETS = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
]  # fmt: skip


class Instruments:
    """The run, model, tool and approval instruments of one meter."""

    def __init__(self, provider: MeterProvider | None = None) -> None:
        from oarlock import __version__

        meter = metrics.get_meter("oarlock", __version__, meter_provider=provider)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used per model request, by token type",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.operation_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of model requests, retries included",
            explicit_bucket_boundaries_advisory=_SECOND_BUCKETS,
        )
        self.runs_started = meter.create_counter(
            "oarlock.runs.started", unit="{run}", description="Runs created"
        )
        self.runs_finished = meter.create_counter(
            "oarlock.runs.finished", unit="{run}", description="Runs ended, by final status"
        )
        self.turns = meter.create_counter(
            "oarlock.turns", unit="{turn}", description="Model responses (turns) of runs"
        )
        self.cost = meter.create_counter(
            "oarlock.cost", unit="USD", description="Priced cost of model requests"
        )
        self.tool_duration = meter.create_histogram(
            "oarlock.tool.duration",
            unit="s",
            description="Duration of governed tool calls, by tool and receipt status",
            explicit_bucket_boundaries_advisory=_SECOND_BUCKETS,
        )
        self.replays = meter.create_counter(
            "oarlock.tool.replays",
            unit="{call}",
            description="Calls answered with an earlier receipt (not run again)",
        )
        self.uncertain = meter.create_up_down_counter(
            "oarlock.receipts.uncertain",
            unit="{receipt}",
            description="Uncertain receipts not reconciled yet (calls whose outcome is unknown)",
        )
        self.approvals_pending = meter.create_up_down_counter(
            "oarlock.approvals.pending", unit="{approval}", description="Approvals awaited"
        )
        self.approval_wait = meter.create_histogram(
            "oarlock.approval.wait",
            unit="s",
            description="Time from an approval's request to its decision",
        )
        self.approvals_expired = meter.create_counter(
            "oarlock.approvals.expired",
            unit="{approval}",
            description="Approvals denied by policy when their deadline passed",
        )
