// Bindings of cc/graph_breaks: the Ledger (Python's account() records into its own one), the
// process-wide ledger the C++ hooks write to, the hooks themselves so Python-side lowering
// code can report through the same API as a fork's C++, and the Tap: the stand-in for the two
// torch_xla entry points every step crosses, which records in C++ to keep accounting cheap.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cc/graph_breaks/hooks.h"
#include "cc/graph_breaks/ledger.h"
#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;
namespace gb = txe::graph_breaks;

namespace {

py::dict SiteDict(const gb::EventSite& s) {
  py::dict d;
  d["kind"] = gb::KindName(s.kind);
  d["stage"] = gb::StageName(s.stage);
  d["key"] = s.key;
  d["reason"] = s.reason;
  d["file"] = s.file;
  d["line"] = s.line;
  d["replica"] = s.replica;
  d["count"] = s.count;
  return d;
}

py::dict EventDict(const gb::Event& e) {
  py::dict d = SiteDict(e);
  d["seq"] = e.seq;
  d["duration_ns"] = e.duration_ns;
  d["timestamp_ns"] = e.timestamp_ns;
  d["thread"] = e.thread;
  return d;
}

py::dict AggregateDict(const gb::Aggregate& a) {
  py::dict d = SiteDict(a);
  d["total_ns"] = a.total_ns;
  d["max_ns"] = a.max_ns;
  return d;
}

py::dict TotalsDict(const gb::KindTotals& t, bool ns) {
  py::dict d;
  for (int k = 0; k < gb::kNumKinds; ++k) d[gb::KindName(static_cast<gb::Kind>(k))] = ns ? t.total_ns[k] : t.count[k];
  return d;
}

txe::Status CheckReplica(int replica) {
  if (replica < gb::kNoReplica || replica > gb::kMaxReplica) {
    return txe::InvalidArgumentError("replica must be -1 (none) or 0.." + std::to_string(gb::kMaxReplica) +
                                     ", got " + std::to_string(replica));
  }
  return txe::OkStatus();
}

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = kDigits[b >> 4];
    out[2 * i + 1] = kDigits[b & 15];
  }
  return out;
}

// Stands in for a torch_xla function while accounting regions are open: calls the original with
// the same arguments, returns its result unchanged, and records one event into each open ledger.
//   "sync": torch_xla's lazy sync (_xla_step_marker). Key: how many graphs the sync launched,
//     from torch_xla's compile-lookup counters read around the call (every graph a sync launches
//     first looks up its compile on this thread; executions finish on another thread, so their
//     counter cannot tell).
//   "execute": a cached-graph execution of the Dynamo bridge (_run_cached_graph). Key: the graph
//     hash (first argument, bytes) as hex.
// The replica of the calling thread (its device ordinal) comes from `replica_fn`, asked once per
// thread. If the original raises under "execute", `on_error(exception)` may raise a clearer one.
class Tap {
 public:
  Tap(py::object original, const std::string& mode, py::object replica_fn, py::object counter_value,
      py::object on_error)
      : original_(std::move(original)),
        replica_fn_(std::move(replica_fn)),
        counter_value_(std::move(counter_value)),
        on_error_(std::move(on_error)),
        generation_(next_generation_.fetch_add(1, std::memory_order_relaxed) + 1),
        ledgers_(std::make_shared<Ledgers>()) {
    if (mode == "sync") {
      sync_ = true;
      if (counter_value_.is_none()) {
        txe::python::ThrowIfError(txe::InvalidArgumentError("Tap: mode 'sync' needs counter_value"));
      }
      uncached_ = py::str("UncachedCompile");
      cached_ = py::str("CachedCompile");
    } else if (mode != "execute") {
      txe::python::ThrowIfError(
          txe::InvalidArgumentError("Tap: mode must be 'sync' or 'execute', got '" + mode + "'"));
    }
  }

  py::object Call(const py::args& args, const py::kwargs& kwargs) {
    int64_t before = 0;
    if (sync_) before = Lookups();
    const int64_t t0 = SteadyNowNs();
    py::object out;
    if (sync_ || on_error_.is_none()) {
      out = original_(*args, **kwargs);
    } else {
      try {
        out = original_(*args, **kwargs);
      } catch (py::error_already_set& e) {
        on_error_(e.value());  // raises a clearer exception (chained to this one) or returns
        throw;
      }
    }
    const int64_t ns = SteadyNowNs() - t0;
    std::shared_ptr<const Ledgers> ledgers = ledgers_;  // a region may close while we ran
    if (ledgers->ledgers.empty()) return out;
    const int replica = Replica();
    std::string key;
    if (sync_) {
      key = std::to_string(Lookups() - before);
    } else if (args.size() > 0 && py::isinstance<py::bytes>(args[0])) {
      char* data = nullptr;
      Py_ssize_t size = 0;
      PYBIND11_BYTES_AS_STRING_AND_SIZE(args[0].ptr(), &data, &size);
      key = Hex(std::string_view(data, static_cast<size_t>(size)));
    } else if (args.size() > 0) {
      key = py::str(args[0]);
    }
    const gb::Kind kind = sync_ ? gb::Kind::kSync : gb::Kind::kExecute;
    const gb::Stage stage = sync_ ? gb::Stage::kLazy : gb::Stage::kBridge;
    for (gb::Ledger* ledger : ledgers->ledgers) {
      ledger->RecordInterned(kind, stage, ledger->Intern(key), gb::kEmptyStringId, gb::kEmptyStringId, 0, ns, 1,
                             replica);
    }
    return out;
  }

  // The ledgers to record into (Ledger objects); an empty list stops recording.
  void SetLedgers(const py::list& ledgers) {
    auto next = std::make_shared<Ledgers>();
    for (const py::handle& l : ledgers) {
      next->owners.push_back(py::reinterpret_borrow<py::object>(l));
      next->ledgers.push_back(l.cast<gb::Ledger*>());
    }
    ledgers_ = std::move(next);
  }

  const py::object& original() const { return original_; }

 private:
  struct Ledgers {
    std::vector<py::object> owners;  // keep the Python objects alive while recorded into
    std::vector<gb::Ledger*> ledgers;
  };

  int64_t Lookups() const {
    auto value = [&](const py::str& name) -> int64_t {
      py::object v = counter_value_(name);
      return v.is_none() ? 0 : v.cast<int64_t>();
    };
    return value(uncached_) + value(cached_);
  }

  int Replica() {
    thread_local uint64_t generation = 0;
    thread_local int replica = gb::kNoReplica;
    if (generation != generation_) {
      int r = gb::kNoReplica;
      if (!replica_fn_.is_none()) {
        py::object v = replica_fn_();
        r = v.is_none() ? gb::kNoReplica : v.cast<int>();
      }
      replica = CheckReplica(r).ok() ? r : gb::kNoReplica;
      generation = generation_;
    }
    return replica;
  }

  static inline std::atomic<uint64_t> next_generation_{0};
  py::object original_;
  py::object replica_fn_;
  py::object counter_value_;
  py::object on_error_;
  py::str uncached_, cached_;
  bool sync_ = false;
  const uint64_t generation_;
  std::shared_ptr<const Ledgers> ledgers_;  // replaced, never mutated: only touched with the GIL
};

}  // namespace

TXE_PYBIND_SUBMODULE(graph_breaks, m) {
  py::enum_<gb::Kind>(m, "Kind")
      .value("fx_graph", gb::Kind::kFxGraph)
      .value("graph_break", gb::Kind::kGraphBreak)
      .value("recompile", gb::Kind::kRecompile)
      .value("xla_partition", gb::Kind::kXlaPartition)
      .value("fallback_node", gb::Kind::kFallbackNode)
      .value("fallback_op", gb::Kind::kFallbackOp)
      .value("compile", gb::Kind::kCompile)
      .value("cached_compile", gb::Kind::kCachedCompile)
      .value("execute", gb::Kind::kExecute)
      .value("transfer_to_host", gb::Kind::kTransferToHost)
      .value("sync", gb::Kind::kSync)
      .value("forced_execution", gb::Kind::kForcedExecution);
  py::enum_<gb::Stage>(m, "Stage")
      .value("dynamo", gb::Stage::kDynamo)
      .value("bridge", gb::Stage::kBridge)
      .value("xla", gb::Stage::kXla)
      .value("lazy", gb::Stage::kLazy)
      .value("user", gb::Stage::kUser);

  py::class_<gb::Ledger, std::unique_ptr<gb::Ledger>>(m, "Ledger")
      .def(py::init([](size_t ring_capacity, size_t max_strings, size_t max_aggregates) {
             return txe::python::ValueOrThrow(gb::Ledger::Create({ring_capacity, max_strings, max_aggregates}));
           }),
           py::arg("ring_capacity") = 4096, py::arg("max_strings") = 1 << 16, py::arg("max_aggregates") = 1 << 16)
      .def(
          "record",
          [](gb::Ledger& l, gb::Kind kind, gb::Stage stage, const std::string& key, const std::string& reason,
             const std::string& file, int line, int64_t duration_ns, int64_t count, int replica) {
            txe::python::ThrowIfError(CheckReplica(replica));
            l.Record(kind, stage, key, reason, {file, line}, duration_ns, count, replica);
          },
          py::arg("kind"), py::arg("stage"), py::arg("key") = "", py::arg("reason") = "", py::arg("file") = "",
          py::arg("line") = 0, py::arg("duration_ns") = 0, py::arg("count") = 1, py::arg("replica") = gb::kNoReplica)
      // The hot path for per-step wrappers: ints only (kind and stage as int(Kind.x)), string ids
      // from intern(); about a quarter of record()'s cost per call.
      .def("intern", [](gb::Ledger& l, std::string_view s) { return l.Intern(s); }, py::arg("s"))
      .def("lookup", &gb::Ledger::Lookup, py::arg("id"))
      .def("record_ids",
           [](gb::Ledger& l, int kind, int stage, gb::StringId key, int64_t duration_ns, int64_t count, int replica) {
             if (kind < 0 || kind >= gb::kNumKinds) {
               txe::python::ThrowIfError(txe::InvalidArgumentError(
                   "record_ids: kind must be int(Kind.<name>), got " + std::to_string(kind)));
             }
             if (stage < 0 || stage >= gb::kNumStages) {
               txe::python::ThrowIfError(txe::InvalidArgumentError(
                   "record_ids: stage must be int(Stage.<name>), got " + std::to_string(stage)));
             }
             if (key >= l.num_strings()) {
               txe::python::ThrowIfError(txe::InvalidArgumentError(
                   "record_ids: key " + std::to_string(key) + " is not an id from intern()"));
             }
             txe::python::ThrowIfError(CheckReplica(replica));
             l.RecordInterned(static_cast<gb::Kind>(kind), static_cast<gb::Stage>(stage), key, gb::kEmptyStringId,
                              gb::kEmptyStringId, 0, duration_ns, count, replica);
           },
           py::arg("kind"), py::arg("stage"), py::arg("key"), py::arg("duration_ns"), py::arg("count"),
           py::arg("replica") = gb::kNoReplica)
      .def("count", &gb::Ledger::Count, py::arg("kind"))
      .def("total_ns", &gb::Ledger::TotalNs, py::arg("kind"))
      .def("counts", [](const gb::Ledger& l) { return TotalsDict(l.Totals(), false); })
      .def("totals_ns", [](const gb::Ledger& l) { return TotalsDict(l.Totals(), true); })
      .def("aggregates",
           [](const gb::Ledger& l) {
             py::list out;
             for (const auto& a : l.Aggregates()) out.append(AggregateDict(a));
             return out;
           })
      .def("recent_events",
           [](const gb::Ledger& l) {
             py::list out;
             for (const auto& e : l.RecentEvents()) out.append(EventDict(e));
             return out;
           })
      .def_property_readonly("events_recorded", &gb::Ledger::events_recorded)
      .def_property_readonly("ring_capacity", &gb::Ledger::ring_capacity)
      .def_property_readonly("epoch_ns", &gb::Ledger::epoch_ns,
                             "steady clock (time.monotonic_ns() on Linux) at creation; event timestamps add to it")
      .def_property_readonly("memory_bytes", &gb::Ledger::MemoryBytes);

  py::class_<Tap, std::shared_ptr<Tap>>(m, "Tap")
      .def(py::init<py::object, const std::string&, py::object, py::object, py::object>(), py::arg("original"),
           py::arg("mode"), py::arg("replica_fn") = py::none(), py::arg("counter_value") = py::none(),
           py::arg("on_error") = py::none())
      .def("__call__", &Tap::Call)
      .def("set_ledgers", &Tap::SetLedgers, py::arg("ledgers"))
      .def_property_readonly("original", &Tap::original);
  m.attr("NO_REPLICA") = gb::kNoReplica;

  m.def("global_ledger", &gb::GlobalLedger, py::return_value_policy::reference,
        "The process-wide ledger the C++ hooks (cc/graph_breaks/hooks.h) write to.");
  m.def("set_hooks_enabled", &gb::SetHooksEnabled, py::arg("enabled"));
  m.def("hooks_enabled", &gb::HooksEnabled);
  m.def(
      "on_graph_break",
      [](const std::string& reason, const std::string& file, int line, gb::Stage stage) {
        gb::OnGraphBreak(reason, {file, line}, stage);
      },
      py::arg("reason"), py::arg("file") = "", py::arg("line") = 0, py::arg("stage") = gb::Stage::kDynamo);
  m.def(
      "on_fallback_op", [](const std::string& op) { gb::OnFallbackOp(op); }, py::arg("aten_op"));
  m.def(
      "on_compile", [](const std::string& h, bool cached, int64_t ns) { gb::OnCompile(h, cached, ns); },
      py::arg("graph_hash"), py::arg("cached"), py::arg("duration_ns") = 0);
  m.def(
      "on_execute", [](const std::string& h, int64_t ns) { gb::OnExecute(h, ns); }, py::arg("graph_hash"),
      py::arg("duration_ns") = 0);
  m.def(
      "on_transfer_to_host", [](const std::string& what, int64_t ns) { gb::OnTransferToHost(what, ns); },
      py::arg("what"), py::arg("duration_ns") = 0);
  m.def(
      "on_sync", [](const std::string& reason) { gb::OnSync(reason); }, py::arg("reason") = "");
}
