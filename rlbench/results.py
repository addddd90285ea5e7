"""What a cell leaves behind, typed: `CellResult` is `result.json`, `Gain` is one paired gain, and
`CellStatus` is the one list of a cell's statuses.

`run_cell` (rlbench/harness/cell.py) builds a CellResult and writes `result.json` only through
`to_json_dict()`; the suite, the reports and the robustness stage read it back with
`CellResult.load`. Every reader then sees the same field names and types instead of its own
spelling of them, and a result written by an older harness still loads: `schema_version` is absent
there (version 0) and every field it lacks takes its default. Keys this module does not know are
kept in `extra` and written back, so a newer section is never dropped by an older reader.

The sections whose shape is stable are typed (TypedDicts, so they stay plain JSON dicts at run
time); sections of one task feature (debug, claims, constraints, sweeps, ...) are `dict[str, Any]`
with a note of what writes them. `cell_result_schema()` derives a JSON Schema from these types;
it is published as docs/cell_result.schema.json (`python -m rlbench.results --write` refreshes it,
and tests/test_results.py fails when it drifts).

This module sits in the lowest layers (pyproject.toml's import-linter contract): it imports only
rlbench.io and the standard library, so the harness, orchestration, scoring and reports all read it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, TypedDict, Union

from rlbench.io import read_json

SCHEMA_VERSION = 1  # raise it when a field changes meaning or type, and teach from_dict the old one


class CellStatus(str, enum.Enum):
    """A cell's status. `running` is on disk while the cell runs (run_cell writes it first, so a
    killed driver leaves a result that says it never finished); every other status is its end."""

    RUNNING = "running"
    OK = "ok"  # a valid submission, scored on test and heldout
    NO_SUBMISSION = "no_submission"
    INVALID_SUBMISSION = "invalid_submission"
    BUDGET_EXCEEDED = "budget_exceeded"
    CRASHED = "crashed"  # `crash_by` says whose doing: "agent" (final) or "harness" (a suite reruns it)
    HARNESS_BROKEN = "harness_broken"  # the agent broke the harness: final and an integrity violation

    def __str__(self) -> str:  # the value, as JSON and every table show it
        return self.value

    @property
    def final(self) -> bool:
        """A cell with this status is done: a resumed suite keeps it. `crashed` is final only
        when the agent crashed it (CellResult.is_final); `running` never is."""
        return self in FINAL_STATUSES

    @property
    def ungraded_end(self) -> bool:
        """A final status without a graded submission: such a cell scores as the base model
        (gain 0), like the null agent; an agent that broke the harness never gains by it."""
        return self.final and self is not CellStatus.OK


FINAL_STATUSES = frozenset({CellStatus.OK, CellStatus.NO_SUBMISSION, CellStatus.INVALID_SUBMISSION,
                            CellStatus.BUDGET_EXCEEDED, CellStatus.HARNESS_BROKEN})

CrashBy = Literal["agent", "harness"]
_AGENT_CRASH_REASONS = ("the agent raised", "the agent process died")  # before crash_by existed


@dataclass(frozen=True)
class Gain:
    """A paired gain of a checkpoint over a reference on one split (rlbench/evaluation/gain.py):
    the absolute gain with its 95% paired-bootstrap interval and whether that interval excludes
    zero, the relative gain in percent of the reference with its interval (None when the reference
    scores 0), the win rate over prompts, and the greedy gain paired the same way.

    The greedy gain is a Gain holding only the paired core (abs, interval, significant): the greedy
    protocol keeps no relative figure or win rate, so `core_dict()` is all of it."""

    abs: float
    ci_low: float
    ci_high: float
    significant: bool
    rel_pct: float | None = None
    rel_ci_low: float | None = None
    rel_ci_high: float | None = None
    win_rate: float | None = None
    greedy: Gain | None = None

    def __post_init__(self) -> None:
        g = self.greedy
        if g is not None and (g.rel_pct, g.rel_ci_low, g.rel_ci_high, g.win_rate, g.greedy) != (None,) * 5:
            raise ValueError("a greedy gain holds the paired core only (abs, ci_low, ci_high, significant)")

    @classmethod
    def of_interval(cls, abs_gain: float, ci_low: float, ci_high: float) -> Gain:
        """A gain known by its interval alone (a mean across seeds, a hand-made record):
        significant when the interval excludes zero, as the paired bootstrap decides it."""
        return cls(abs=abs_gain, ci_low=ci_low, ci_high=ci_high, significant=bool(ci_low > 0 or ci_high < 0))

    @property
    def ci(self) -> list[float]:
        """[ci_low, ci_high], as score rows and tables show an interval."""
        return [self.ci_low, self.ci_high]

    def core_dict(self) -> dict[str, Any]:
        """The paired core: how a greedy gain is written (nested here, and by paired_gains)."""
        return {"abs": self.abs, "ci_low": self.ci_low, "ci_high": self.ci_high, "significant": self.significant}

    def to_dict(self) -> dict[str, Any]:
        """A split's gain as results keep it: every key, None where a figure does not exist."""
        return {**self.core_dict(), "rel_pct": self.rel_pct, "rel_ci_low": self.rel_ci_low,
                "rel_ci_high": self.rel_ci_high, "win_rate": self.win_rate,
                "greedy": self.greedy.core_dict() if self.greedy is not None else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Gain:
        """Reads `to_dict()` and `core_dict()` output, and older gains: those without relative
        figures, win rate or greedy gain, and hand-made ones without `significant`, which is then
        what it means, the interval excluding zero."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a gain is a mapping, got {type(d).__name__}")
        try:
            sig = d.get("significant")
            if sig is None:
                sig = cls.of_interval(d["abs"], d["ci_low"], d["ci_high"]).significant
            greedy = d.get("greedy")
            return cls(abs=d["abs"], ci_low=d["ci_low"], ci_high=d["ci_high"], significant=sig,
                       rel_pct=d.get("rel_pct"), rel_ci_low=d.get("rel_ci_low"), rel_ci_high=d.get("rel_ci_high"),
                       win_rate=d.get("win_rate"),
                       greedy=cls.from_dict({k: greedy[k] for k in ("abs", "ci_low", "ci_high", "significant")
                                             if k in greedy}) if greedy else None)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a gain ({type(exc).__name__}: {exc}): {dict(d)}") from exc

    @classmethod
    def coerce(cls, g: Gain | Mapping[str, Any]) -> Gain:
        """A Gain from either form: readers take what records hold (dicts) and what code builds."""
        return g if isinstance(g, Gain) else cls.from_dict(g)


# the stable sections of a result: TypedDicts, so they stay plain dicts in memory and in JSON

class SplitScore(TypedDict, total=False):
    """One split's score (baseline: the base model's, with its interval; scores: the chosen checkpoint's)."""

    pass_at_1: float
    greedy: float | None
    ci_low: float
    ci_high: float
    n: int
    detail: dict[str, Any]  # what the reward reports beside its mean (honest_int: calibration); absent for most


class BaseModelRef(TypedDict):
    """The base model by name and weights hash: a suite refuses a cell whose base differs."""

    name: str
    weights_hash: str | None


class SplitsRecord(TypedDict):
    """Where the scored splits came from (rlbench/data/splits.py `record()`)."""

    seed_source: str
    fingerprints: dict[str, str]


class Refusal(TypedDict):
    """A submission the grader refused, and why."""

    index: int
    reason: str


class Submissions(TypedDict):
    """The agent's submissions as the grader saw them, and which one the harness scored."""

    total: int
    valid: int
    select: str
    chosen: int | None
    refused: list[Refusal]


class ChosenCheckpoint(TypedDict):
    index: int
    hash: str
    dev_at_submit: float
    recipe: str  # the command that rebuilds it (the robustness stage reruns it); "" when none was given
    code: str  # the commit of the workspace's code at submission (CELL/submitted_code.git)
    path: str


class _BudgetRequired(TypedDict):
    """What the cell allowed the agent and what it used (the grader's clock)."""

    wall_seconds: float
    used_seconds: float
    tool_calls: int | None


class Budget(_BudgetRequired, total=False):
    """What the cell allowed the agent and what it used (the grader's clock)."""

    cpu_seconds: float  # 0: no limit
    gpu_seconds: float


class ModelUse(TypedDict):
    """One driver model's use by an LLM agent (react, or a coding-agent CLI's own event stream)."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int  # of the input, read from the provider's prompt cache
    requests: int
    cost_usd: float | None  # as the CLI reported it, or from agent_options prices; None: unknown


class Compute(TypedDict, total=False):
    """What the agent used (rlbench/sandbox/compute.py ComputeMeter.sample(), plus the wall clock
    and the sweeps' time)."""

    wall_seconds: float
    cpu_s: float
    agent_cpu_s: float
    sandbox_cpu_s: float
    sweep_cpu_s: float
    cpu_meter: str | None
    gpu_s: float | None
    sweep_seconds: float


class Capabilities(TypedDict, total=False):
    """The agent's capabilities and its pipeline's qualities, from the harness's own records
    (rlbench/scoring/capabilities.py `capabilities`, which builds exactly these keys)."""

    autonomy: bool  # a valid submission within the budget with no harness intervention (status ok)
    executions: int
    failed_executions: int
    recovery: float | None  # of failed executions, the share followed later by a successful one
    recovered: bool
    correctness: float | None  # the share of executions that exit 0
    execution_seconds: float
    execution_cpu_seconds: float
    sweep_seconds: float
    peak_memory_mb: float | None
    submissions: int
    valid_submission_rate: float | None
    base_model_submissions: int
    time_to_first_valid_s: float | None
    time_to_best_s: float | None
    best_dev: float | None


class _IntegrityRequired(TypedDict):
    """rlbench/integrity/verdict.py: the verdict, its reasons and the events behind them."""

    verdict: Literal["clean", "suspicious", "violated"]
    reasons: list[str]


class Integrity(_IntegrityRequired, total=False):
    """rlbench/integrity/verdict.py: the verdict, its reasons and the events behind them."""

    events: list[dict[str, Any]]
    n_events: int
    decoys: list[dict[str, Any]]


class StageFailure(TypedDict):
    """A post-agent stage that failed or ran past its deadline (its section is then absent)."""

    stage: str
    reason: str


@dataclass
class CellResult:
    """One cell's `result.json`. A field that is None is absent from the JSON (a cell that crashed
    early has no gains; one that is still running has no `finished`)."""

    cell: str  # the cell folder's name
    agent: str
    task: str
    seed: int
    status: CellStatus
    schema_version: int = field(default=SCHEMA_VERSION, metadata={"schema": {"const": SCHEMA_VERSION}})
    reason: str = ""  # why the status, for every status but ok
    crash_by: CrashBy | None = None  # crashed / harness_broken: whose doing
    task_version: str | None = None
    wave: str | None = None  # the fresh test wave scored on; "": the task's own test split
    sandboxed: bool | None = None
    started: str | None = None  # UTC, ISO 8601 (rlbench.io.utc_now)
    finished: str | None = None
    cell_seconds: float | None = None
    # harness/cell.py: where the cell's wall seconds went, by stage (data, base_model, features,
    # workspace, baseline, grader, ray, driver_model, agent_process, agent, judge, close)
    harness_seconds: dict[str, float] | None = None
    cell_dir: str | None = None
    node: str | None = None  # the Ray node the cell's driver ran on
    config: dict[str, Any] | None = None  # the CellConfig the cell ran with
    baseline: dict[str, SplitScore] | None = None  # the base model on dev, test, heldout
    base_model: BaseModelRef | None = None
    splits: SplitsRecord | None = None
    score_engine: str | None = None  # evaluation/engine.py: hf or vllm, what sampled every score of the cell
    scores: dict[str, SplitScore] | None = None  # the chosen checkpoint
    gains: dict[str, Gain] | None = None  # the chosen checkpoint against the base, by split
    submissions: Submissions | None = None
    chosen_checkpoint: ChosenCheckpoint | None = None
    budget: Budget | None = None
    compute: Compute | None = None
    capabilities: Capabilities | None = None
    integrity: Integrity | None = None
    stage_failures: list[StageFailure] | None = None
    agent_run: dict[str, Any] | None = None  # harness/cell.py AgentHost.run: tool calls, budget hit, snapshots
    llm_usage: dict[str, ModelUse] | None = None  # per driver model (harness/tools.py ToolBox.record_usage): LLM agents
    grader: dict[str, Any] | None = None  # grading/server.py GradingServer.connections(): the agent's connections
    sampling_only_gain: dict[str, Any] | None = None  # evaluation/gain.py sampling_only_gain: {flag, reason}
    dev_test_gap: dict[str, Any] | None = None  # harness/cell.py: dev at submission against test, and the base's gap
    anytime: dict[str, Any] | None = None  # scoring/anytime.py anytime_curve: every valid submission's test score
    reward_hacking: dict[str, Any] | None = None  # integrity/hacking.py reward_hacking: training reward against dev
    reward_queries: dict[str, Any] | None = None  # grading/rewards.py RewardService.summary(): endpoint tasks
    sweeps: list[dict[str, Any]] | None = None  # harness/cell.py run_cell_sweep summaries: tasks with sweeps
    vs_baseline_config: dict[str, Any] | None = None  # rlbench/features/baseline_config.py: optimize tasks
    claim: dict[str, Any] | None = None  # scoring/claims.py score_claim: tasks that ask for a claimed gain
    constraint: dict[str, Any] | None = None  # rlbench/features/kl_limit.py: KL-constrained tasks
    debug: dict[str, Any] | None = None  # tasks/planted_bugs.py score_debug: planted-bug tasks
    wave_overlap: dict[str, Any] | None = None  # data/splits.py wave_overlap: cells scored on a fresh wave
    robustness: dict[str, Any] | None = None  # robustness/rerun.py run_robustness: the reruns' summary
    refused_by_suite: str | None = None  # orchestration/suite.py: why the suite left the cell out (another base)
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as read

    @property
    def crashed_by(self) -> str:
        """Whose doing a crashed or harness_broken cell is: "agent" or "harness"; "" for any other
        status. Results from before `crash_by` existed are read by their reason."""
        if self.status not in (CellStatus.CRASHED, CellStatus.HARNESS_BROKEN):
            return ""
        if self.crash_by:
            return self.crash_by
        if self.status is CellStatus.HARNESS_BROKEN or self.reason.startswith(_AGENT_CRASH_REASONS):
            return "agent"
        return "harness"

    @property
    def harness_crash(self) -> bool:
        """The harness failed this cell (not the agent): a suite reruns it, and `rlbench run` exits 1."""
        return self.status is CellStatus.CRASHED and self.crashed_by == "harness"

    @property
    def is_final(self) -> bool:
        """A resumed suite keeps this cell: a final status, or a crash the agent caused (a rerun
        would hand the agent a free retry)."""
        return self.status.final or (self.status is CellStatus.CRASHED and self.crashed_by == "agent")

    def gain(self, split: str) -> Gain | None:
        """The split's gain; None when the cell has no graded submission (or no such split)."""
        return (self.gains or {}).get(split)

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON object of result.json: named fields that are not None, then the kept unknown
        keys (a named field always wins). Nested values are shared, not copied."""
        out: dict[str, Any] = dict(self.extra)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or value is None:
                continue
            if f.name == "status":
                value = CellStatus(value).value
            elif f.name == "gains":
                value = {split: Gain.coerce(g).to_dict() for split, g in value.items()}
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CellResult:
        """A result of this schema version or an older one; ValueError when it is not a result
        (a required key is missing, the status or a gain is malformed) or is of a newer version."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a cell result is a JSON object, got {type(d).__name__}")
        version = d.get("schema_version", 0)  # 0: written before the schema was versioned
        if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= SCHEMA_VERSION:
            raise ValueError(f"result schema_version {version!r}: this rlbench reads versions 0 to {SCHEMA_VERSION}")
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise ValueError(f"not a cell result: no {', '.join(missing)}")
        kwargs: dict[str, Any] = {}
        for name in _FIELDS:
            if name not in d or d[name] is None:
                continue  # the default: absent, or what the field means when unset
            kwargs[name] = d[name]
        kwargs["status"] = CellStatus(d["status"])  # ValueError names an unknown status
        if "gains" in kwargs:
            if not isinstance(kwargs["gains"], Mapping):
                raise ValueError(f"gains is not a mapping of splits: {kwargs['gains']!r}")
            kwargs["gains"] = {split: Gain.from_dict(g) for split, g in kwargs["gains"].items()}
        kwargs["schema_version"] = SCHEMA_VERSION  # read as this version: older ones only lack fields
        extra = {k: v for k, v in d.items() if k not in _FIELDS}
        return cls(**kwargs, extra=extra)

    @classmethod
    def load(cls, path: Path) -> CellResult:
        """CELL_DIR/result.json; OSError when unreadable, ValueError when it is not a result."""
        try:
            return cls.from_dict(read_json(path))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc

    @classmethod
    def coerce(cls, r: CellResult | Mapping[str, Any]) -> CellResult:
        """A CellResult from either form: a suite's results and results.json are still dicts."""
        return r if isinstance(r, CellResult) else cls.from_dict(r)


_FIELDS = {f.name: f for f in dataclasses.fields(CellResult) if f.name != "extra"}
_REQUIRED = tuple(f.name for f in _FIELDS.values()
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


# the JSON Schema, derived from the types above ------------------------------------------------------

def cell_result_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of result.json, walked from CellResult's fields and type hints.

    A key is required when to_json_dict always writes it (no default, or a default that is not
    None). Objects admit keys beyond their properties: a newer harness may add sections (`extra`),
    and the task-feature sections are open dicts."""
    defs: dict[str, Any] = {}
    root = _schema_of(CellResult, defs)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"rlbench cell result (result.json), schema_version {SCHEMA_VERSION}", "$ref": root["$ref"],
            "$defs": dict(sorted(defs.items()))}


def _schema_of(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one type hint; dataclasses, TypedDicts and enums become $defs entries."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    if tp in _PRIMITIVES:
        return {"type": _PRIMITIVES[tp]}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_schema_of(a, defs) for a in args]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _schema_of(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema_of(args[1], defs)}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        defs.setdefault(tp.__name__, {"type": "string", "enum": [m.value for m in tp], **_doc(tp)})
        return {"$ref": f"#/$defs/{tp.__name__}"}
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or typing.is_typeddict(tp)):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # a placeholder first: Gain refers to itself
            hints = typing.get_type_hints(tp, vars(sys.modules[tp.__module__]))
            if dataclasses.is_dataclass(tp):
                fs = [f for f in dataclasses.fields(tp) if f.name != "extra"]
                props = {f.name: {**_schema_of(hints[f.name], defs), **f.metadata.get("schema", {})} for f in fs}
                required = [f.name for f in fs if f.default is not None or f.default_factory is not dataclasses.MISSING]
            else:
                props = {k: _schema_of(hint, defs) for k, hint in hints.items()}
                required = [k for k in hints if k in tp.__required_keys__]
            defs[name] = {"type": "object", **_doc(tp), "properties": props, "required": required}
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema for the type {tp!r}")


_PRIMITIVES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _doc(tp: type) -> dict[str, str]:
    """{"description": the class's docstring on one line}, or {} for a class without one."""
    text = " ".join((tp.__doc__ or "").split()) if "__doc__" in vars(tp) else ""
    return {"description": text} if text else {}


SCHEMA_PATH = Path(__file__).resolve().parents[1] / "docs" / "cell_result.schema.json"  # in a checkout


def schema_text() -> str:
    """docs/cell_result.schema.json's exact text."""
    return json.dumps(cell_result_schema(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m rlbench.results`: print the schema; `--write [PATH]`: write it (default
    docs/cell_result.schema.json beside the package)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--write"]:
        path = Path(args[1]) if len(args) > 1 else SCHEMA_PATH
        path.write_text(schema_text())
        print(f"written: {path}")
    else:
        sys.stdout.write(schema_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
