// Bindings of cc/graph_breaks: the Ledger (Python's account() records into its own one), the
// process-wide ledger the C++ hooks write to, and the hooks themselves so Python-side lowering
// code can report through the same API as a fork's C++.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <string_view>

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
             const std::string& file, int line, int64_t duration_ns, int64_t count) {
            l.Record(kind, stage, key, reason, {file, line}, duration_ns, count);
          },
          py::arg("kind"), py::arg("stage"), py::arg("key") = "", py::arg("reason") = "", py::arg("file") = "",
          py::arg("line") = 0, py::arg("duration_ns") = 0, py::arg("count") = 1)
      // The hot path for per-step wrappers: ints only (kind and stage as int(Kind.x)), string ids
      // from intern(); about a quarter of record()'s cost per call.
      .def("intern", [](gb::Ledger& l, std::string_view s) { return l.Intern(s); }, py::arg("s"))
      .def("lookup", &gb::Ledger::Lookup, py::arg("id"))
      .def("record_ids",
           [](gb::Ledger& l, int kind, int stage, gb::StringId key, int64_t duration_ns, int64_t count) {
             if (kind < 0 || kind >= gb::kNumKinds) {
               throw py::value_error("record_ids: kind must be int(Kind.<name>), got " + std::to_string(kind));
             }
             if (stage < 0 || stage >= gb::kNumStages) {
               throw py::value_error("record_ids: stage must be int(Stage.<name>), got " + std::to_string(stage));
             }
             if (key >= l.num_strings()) {
               throw py::value_error("record_ids: key " + std::to_string(key) + " is not an id from intern()");
             }
             l.RecordInterned(static_cast<gb::Kind>(kind), static_cast<gb::Stage>(stage), key, gb::kEmptyStringId,
                              gb::kEmptyStringId, 0, duration_ns, count);
           },
           py::arg("kind"), py::arg("stage"), py::arg("key"), py::arg("duration_ns"), py::arg("count"))
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
      .def_property_readonly("memory_bytes", &gb::Ledger::MemoryBytes);

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
