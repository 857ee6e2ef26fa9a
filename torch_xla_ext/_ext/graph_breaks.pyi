from __future__ import annotations
import typing
__all__: list[str] = ['Aggregate', 'Event', 'EventSite', 'Kind', 'KindTotals', 'Ledger', 'NO_REPLICA', 'Stage', 'Tap', 'global_ledger', 'hooks_enabled', 'on_compile', 'on_execute', 'on_fallback_op', 'on_graph_break', 'on_sync', 'on_transfer_to_host', 'set_hooks_enabled']
class Kind:
    """
    Members:
    
      fx_graph
    
      graph_break
    
      recompile
    
      xla_partition
    
      fallback_node
    
      fallback_op
    
      compile
    
      cached_compile
    
      execute
    
      transfer_to_host
    
      sync
    
      forced_execution
    """
    __members__: typing.ClassVar[dict[str, Kind]]
    cached_compile: typing.ClassVar[Kind]
    compile: typing.ClassVar[Kind]
    execute: typing.ClassVar[Kind]
    fallback_node: typing.ClassVar[Kind]
    fallback_op: typing.ClassVar[Kind]
    forced_execution: typing.ClassVar[Kind]
    fx_graph: typing.ClassVar[Kind]
    graph_break: typing.ClassVar[Kind]
    recompile: typing.ClassVar[Kind]
    sync: typing.ClassVar[Kind]
    transfer_to_host: typing.ClassVar[Kind]
    xla_partition: typing.ClassVar[Kind]
    @typing.overload
    def __eq__(self, other: Kind) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: Kind) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class Stage:
    """
    Members:
    
      dynamo
    
      bridge
    
      xla
    
      lazy
    
      user
    """
    __members__: typing.ClassVar[dict[str, Stage]]
    bridge: typing.ClassVar[Stage]
    dynamo: typing.ClassVar[Stage]
    lazy: typing.ClassVar[Stage]
    user: typing.ClassVar[Stage]
    xla: typing.ClassVar[Stage]
    @typing.overload
    def __eq__(self, other: Stage) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: Stage) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class EventSite:
    """
    Where and what: the fields an event and an aggregate row share.
    """
    @property
    def count(self) -> int:
        """
        occurrences (an event's own count; a row's sum)
        """
    @property
    def file(self) -> str:
        ...
    @property
    def key(self) -> str:
        ...
    @property
    def kind(self) -> Kind:
        ...
    @property
    def line(self) -> int:
        ...
    @property
    def reason(self) -> str:
        ...
    @property
    def replica(self) -> int:
        """
        NO_REPLICA (-1) when the event has none
        """
    @property
    def stage(self) -> Stage:
        ...
class Event(EventSite):
    """
    One recorded event, from the ledger's bounded ring.
    """
    @property
    def duration_ns(self) -> int:
        ...
    @property
    def seq(self) -> int:
        """
        0-based position in the ledger's history
        """
    @property
    def thread(self) -> int:
        """
        small per-process thread index
        """
    @property
    def timestamp_ns(self) -> int:
        """
        steady clock, relative to the ledger's creation (Ledger.epoch_ns)
        """
class Aggregate(EventSite):
    """
    The events of one site, summed (never dropped).
    """
    @property
    def max_ns(self) -> int:
        ...
    @property
    def total_ns(self) -> int:
        ...
class KindTotals:
    """
    Counts and total durations per Kind, at one moment.
    """
    def count(self, kind: Kind) -> int:
        ...
    def total_ns(self, kind: Kind) -> int:
        ...
class Ledger:
    def __init__(self, ring_capacity: typing.SupportsInt | typing.SupportsIndex = 4096, max_strings: typing.SupportsInt | typing.SupportsIndex = 65536, max_aggregates: typing.SupportsInt | typing.SupportsIndex = 65536) -> None:
        ...
    def aggregates(self) -> list[Aggregate]:
        """
        one row per site, by kind, then by count (largest first)
        """
    def count(self, kind: Kind) -> int:
        ...
    def intern(self, s: str) -> int:
        ...
    def lookup(self, id: typing.SupportsInt | typing.SupportsIndex) -> str:
        ...
    def recent_events(self) -> list[Event]:
        """
        the bounded ring's events, oldest first
        """
    def record(self, kind: Kind, stage: Stage, key: str = '', reason: str = '', file: str = '', line: typing.SupportsInt | typing.SupportsIndex = 0, duration_ns: typing.SupportsInt | typing.SupportsIndex = 0, count: typing.SupportsInt | typing.SupportsIndex = 1, replica: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
        ...
    def record_ids(self, kind: typing.SupportsInt | typing.SupportsIndex, stage: typing.SupportsInt | typing.SupportsIndex, key: typing.SupportsInt | typing.SupportsIndex, duration_ns: typing.SupportsInt | typing.SupportsIndex, count: typing.SupportsInt | typing.SupportsIndex, replica: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
        ...
    def total_ns(self, kind: Kind) -> int:
        ...
    def totals(self) -> KindTotals:
        """
        every Kind's count and total duration, read at once
        """
    @property
    def epoch_ns(self) -> int:
        """
        steady clock (time.monotonic_ns() on Linux) at creation; event timestamps add to it
        """
    @property
    def events_recorded(self) -> int:
        ...
    @property
    def memory_bytes(self) -> int:
        ...
    @property
    def ring_capacity(self) -> int:
        ...
class Tap:
    def __init__(self, original: typing.Any, mode: str, replica_fn: typing.Any = None, counter_value: typing.Any = None, on_error: typing.Any = None, before: typing.Any = None, after: typing.Any = None) -> None:
        ...
    def set_ledgers(self, ledgers: list) -> None:
        ...
    def stand_in(self) -> typing.Any:
        """
        The callable to put in place of the original: calls it and records into the ledgers.
        """
    @property
    def original(self) -> typing.Any:
        ...
def global_ledger() -> Ledger:
    """
    The process-wide ledger the C++ hooks (cc/graph_breaks/hooks.h) write to.
    """
def hooks_enabled() -> bool:
    ...
def on_compile(graph_hash: str, cached: bool, duration_ns: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
    ...
def on_execute(graph_hash: str, duration_ns: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
    ...
def on_fallback_op(aten_op: str) -> None:
    ...
def on_graph_break(reason: str, file: str = '', line: typing.SupportsInt | typing.SupportsIndex = 0, stage: Stage = Stage.dynamo) -> None:
    ...
def on_sync(reason: str = '') -> None:
    ...
def on_transfer_to_host(what: str, duration_ns: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
    ...
def set_hooks_enabled(enabled: bool) -> None:
    ...
NO_REPLICA: int = -1
