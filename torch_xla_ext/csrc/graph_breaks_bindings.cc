// Bindings of cc/graph_breaks: the Ledger (Python's account() records into its own one), the
// process-wide ledger the C++ hooks write to, the hooks themselves so Python-side lowering
// code can report through the same API as a fork's C++, and the Tap: the stand-in for the two
// torch_xla entry points every step crosses, which records in C++ to keep accounting cheap.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
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
// A script trace observes every sync through two optional callables, neither of them on the Python
// stack while the original runs (torch_xla's compile analysis names its cause by the innermost
// Python frames): `before()` just before the original, and `after(duration_ns, key)` once it
// returned (key: as above; "" under "execute"), whether or not any ledger is open.
// The callable placed on torch_xla is a plain CPython object (StandIn) whose tp_call forwards the
// caller's argument tuple as is: a step pays for the counter reads and one ledger record, not
// for pybind11's argument handling.
class Tap {
 public:
  Tap(py::object original, const std::string& mode, py::object replica_fn, py::object counter_value,
      py::object on_error, py::object before, py::object after)
      : original_(std::move(original)),
        replica_fn_(std::move(replica_fn)),
        counter_value_(std::move(counter_value)),
        on_error_(std::move(on_error)),
        before_(std::move(before)),
        after_(std::move(after)),
        generation_(next_generation_.fetch_add(1, std::memory_order_relaxed) + 1),
        ledgers_(std::make_shared<Ledgers>()) {
    if (!PyCallable_Check(original_.ptr())) {
      txe::python::ThrowIfError(txe::InvalidArgumentError("Tap: original must be callable"));
    }
    for (const auto& [name, f] : {std::pair<const char*, const py::object*>{"before", &before_}, {"after", &after_}}) {
      if (!f->is_none() && !PyCallable_Check(f->ptr())) {
        txe::python::ThrowIfError(txe::InvalidArgumentError(std::string("Tap: ") + name + " must be callable or None"));
      }
    }
    if (mode == "sync") {
      sync_ = true;
      if (!PyCallable_Check(counter_value_.ptr())) {
        txe::python::ThrowIfError(txe::InvalidArgumentError("Tap: mode 'sync' needs a callable counter_value"));
      }
      uncached_ = py::str("UncachedCompile");
      cached_ = py::str("CachedCompile");
    } else if (mode != "execute") {
      txe::python::ThrowIfError(
          txe::InvalidArgumentError("Tap: mode must be 'sync' or 'execute', got '" + mode + "'"));
    }
  }

  // tp_call of the stand-in: a new reference, or nullptr with a Python error set.
  PyObject* Call(PyObject* args, PyObject* kwargs) {
    int64_t before = 0;
    if (sync_ && !Lookups(&before)) return nullptr;
    if (!before_.is_none()) {
      PyObject* r = PyObject_CallNoArgs(before_.ptr());
      if (r == nullptr) return nullptr;
      Py_DECREF(r);
    }
    const int64_t t0 = SteadyNowNs();
    PyObject* out = PyObject_Call(original_.ptr(), args, kwargs);
    if (out == nullptr) {
      if (!sync_ && !on_error_.is_none()) ExplainError();
      return nullptr;
    }
    const int64_t ns = SteadyNowNs() - t0;
    std::shared_ptr<const Ledgers> ledgers = ledgers_;  // a region may close while the original ran
    if (ledgers->ledgers.empty() && after_.is_none()) return out;
    if (ledgers->ledgers.empty()) return After(out, ns, before);
    int replica = gb::kNoReplica;
    if (!Replica(&replica)) {
      Py_DECREF(out);
      return nullptr;
    }
    std::string key;
    if (sync_) {
      int64_t after = 0;
      if (!Lookups(&after)) {
        Py_DECREF(out);
        return nullptr;
      }
      key = std::to_string(after - before);
    } else if (PyTuple_GET_SIZE(args) > 0) {
      PyObject* first = PyTuple_GET_ITEM(args, 0);
      char* data = nullptr;
      Py_ssize_t size = 0;
      if (PyBytes_Check(first) && PyBytes_AsStringAndSize(first, &data, &size) == 0) {
        key = Hex(std::string_view(data, static_cast<size_t>(size)));
      }
    }
    const gb::Kind kind = sync_ ? gb::Kind::kSync : gb::Kind::kExecute;
    const gb::Stage stage = sync_ ? gb::Stage::kLazy : gb::Stage::kBridge;
    for (gb::Ledger* ledger : ledgers->ledgers) {
      ledger->RecordInterned(kind, stage, ledger->Intern(key), gb::kEmptyStringId, gb::kEmptyStringId, 0, ns, 1,
                             replica);
    }
    return after_.is_none() ? out : After(out, ns, before, &key);
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

  // The garbage collector's view of the Python objects the Tap holds: a cycle through the
  // original, the callbacks or a recorded-into ledger's owner is collected.
  int Traverse(visitproc visit, void* arg) const {
    for (const py::object* o : {&original_, &replica_fn_, &counter_value_, &on_error_, &before_, &after_}) {
      Py_VISIT(o->ptr());
    }
    if (ledgers_ != nullptr) {
      for (const py::object& o : ledgers_->owners) Py_VISIT(o.ptr());
    }
    return 0;
  }

  // Breaks the cycle: what a call does afterwards raises (calling None) instead of crashing.
  void Clear() {
    original_ = py::none();
    replica_fn_ = py::none();
    counter_value_ = py::none();
    on_error_ = py::none();
    before_ = py::none();
    after_ = py::none();
    ledgers_ = std::make_shared<Ledgers>();
  }

 private:
  struct Ledgers {
    std::vector<py::object> owners;  // keep the Python objects alive while recorded into
    std::vector<gb::Ledger*> ledgers;
  };

  // Calls after(duration_ns, key) with the original's result `out` held; returns `out`, or nullptr
  // (out released) when after raised. `key` is computed here when no ledger needed it.
  PyObject* After(PyObject* out, int64_t ns, int64_t before, const std::string* key = nullptr) {
    std::string k;
    if (key != nullptr) {
      k = *key;
    } else if (sync_) {
      int64_t after = 0;
      if (!Lookups(&after)) {
        Py_DECREF(out);
        return nullptr;
      }
      k = std::to_string(after - before);
    }
    PyObject* ns_obj = PyLong_FromLongLong(ns);
    PyObject* key_obj = PyUnicode_FromStringAndSize(k.data(), static_cast<Py_ssize_t>(k.size()));
    PyObject* r = (ns_obj != nullptr && key_obj != nullptr)
                      ? PyObject_CallFunctionObjArgs(after_.ptr(), ns_obj, key_obj, nullptr)
                      : nullptr;
    Py_XDECREF(ns_obj);
    Py_XDECREF(key_obj);
    if (r == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(r);
    return out;
  }

  bool Counter(PyObject* name, int64_t* value) const {
    PyObject* v = PyObject_CallOneArg(counter_value_.ptr(), name);
    if (v == nullptr) return false;
    *value = v == Py_None ? 0 : PyLong_AsLongLong(v);
    Py_DECREF(v);
    return !PyErr_Occurred();
  }

  bool Lookups(int64_t* total) const {
    int64_t u = 0, c = 0;
    if (!Counter(uncached_.ptr(), &u) || !Counter(cached_.ptr(), &c)) return false;
    *total = u + c;
    return true;
  }

  // The calling thread's replica, cached per thread for each of the last few taps.
  bool Replica(int* out) {
    struct Slot {
      uint64_t generation = 0;
      int replica = gb::kNoReplica;
    };
    thread_local std::array<Slot, 4> cache;
    thread_local size_t next = 0;
    for (const Slot& slot : cache) {
      if (slot.generation == generation_) {
        *out = slot.replica;
        return true;
      }
    }
    int r = gb::kNoReplica;
    if (!replica_fn_.is_none()) {
      PyObject* v = PyObject_CallNoArgs(replica_fn_.ptr());
      if (v == nullptr) return false;
      r = v == Py_None ? gb::kNoReplica : static_cast<int>(PyLong_AsLong(v));
      Py_DECREF(v);
      if (PyErr_Occurred()) return false;
    }
    if (!CheckReplica(r).ok()) r = gb::kNoReplica;
    cache[next++ % cache.size()] = Slot{generation_, r};
    *out = r;
    return true;
  }

  // With the original's exception set: on_error(exception) may raise a clearer one (chained to
  // it); if it returns, the original exception stands.
  void ExplainError() const {
    PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != nullptr && value != nullptr) PyException_SetTraceback(value, tb);
    PyObject* r = PyObject_CallOneArg(on_error_.ptr(), value != nullptr ? value : Py_None);
    if (r == nullptr) {  // on_error raised its own exception: that one propagates
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(tb);
      return;
    }
    Py_DECREF(r);
    PyErr_Restore(type, value, tb);
  }

  static inline std::atomic<uint64_t> next_generation_{0};
  py::object original_;
  py::object replica_fn_;
  py::object counter_value_;
  py::object on_error_;
  py::object before_;
  py::object after_;
  py::str uncached_, cached_;
  bool sync_ = false;
  const uint64_t generation_;
  std::shared_ptr<const Ledgers> ledgers_;  // replaced, never mutated: only touched with the GIL
};

// The plain CPython callable placed on torch_xla: it holds the pybind11 Tap object alive.
struct StandInObject {
  PyObject_HEAD
  Tap* tap;
  PyObject* owner;
};

PyObject* StandInCall(PyObject* self, PyObject* args, PyObject* kwargs) {
  Tap* tap = reinterpret_cast<StandInObject*>(self)->tap;
  if (tap == nullptr) {  // cleared by the garbage collector while a reference survived
    PyErr_SetString(PyExc_RuntimeError, "TapStandIn: its Tap was released by the garbage collector");
    return nullptr;
  }
  return tap->Call(args, kwargs);
}

// A GC type: the stand-in holds its Tap (and through it the original torch_xla function), so a
// cycle back to the stand-in (an object that keeps the function it patched) is collectable.
int StandInTraverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(reinterpret_cast<StandInObject*>(self)->owner);
  return 0;
}

int StandInClear(PyObject* self) {
  auto* s = reinterpret_cast<StandInObject*>(self);
  s->tap = nullptr;
  Py_CLEAR(s->owner);
  return 0;
}

void StandInDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  StandInClear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyType_Slot kStandInSlots[] = {
    {Py_tp_call, reinterpret_cast<void*>(&StandInCall)},
    {Py_tp_traverse, reinterpret_cast<void*>(&StandInTraverse)},
    {Py_tp_clear, reinterpret_cast<void*>(&StandInClear)},
    {Py_tp_dealloc, reinterpret_cast<void*>(&StandInDealloc)},
    {Py_tp_doc, const_cast<char*>("A torch_xla entry point with graph-break accounting (see Tap).")},
    {0, nullptr},
};
PyType_Spec kStandInSpec = {"torch_xla_ext._ext.graph_breaks.TapStandIn", sizeof(StandInObject), 0,
                            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, kStandInSlots};

py::object MakeStandIn(const py::object& tap_object) {
  static PyObject* type = nullptr;
  if (type == nullptr) {
    type = PyType_FromSpec(&kStandInSpec);
    if (type == nullptr) throw py::error_already_set();
  }
  PyObject* obj = PyType_GenericAlloc(reinterpret_cast<PyTypeObject*>(type), 0);
  if (obj == nullptr) throw py::error_already_set();
  auto* s = reinterpret_cast<StandInObject*>(obj);
  s->tap = tap_object.cast<Tap*>();
  s->owner = tap_object.ptr();
  Py_INCREF(s->owner);
  return py::reinterpret_steal<py::object>(obj);
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

  // What the ledger returns crosses as these types (attributes, not string keys).
  py::class_<gb::EventSite>(m, "EventSite", "Where and what: the fields an event and an aggregate row share.")
      .def_readonly("kind", &gb::EventSite::kind)
      .def_readonly("stage", &gb::EventSite::stage)
      .def_readonly("key", &gb::EventSite::key)
      .def_readonly("reason", &gb::EventSite::reason)
      .def_readonly("file", &gb::EventSite::file)
      .def_readonly("line", &gb::EventSite::line)
      .def_readonly("replica", &gb::EventSite::replica, "NO_REPLICA (-1) when the event has none")
      .def_readonly("count", &gb::EventSite::count, "occurrences (an event's own count; a row's sum)");
  py::class_<gb::Event, gb::EventSite>(m, "Event", "One recorded event, from the ledger's bounded ring.")
      .def_readonly("seq", &gb::Event::seq, "0-based position in the ledger's history")
      .def_readonly("duration_ns", &gb::Event::duration_ns)
      .def_readonly("timestamp_ns", &gb::Event::timestamp_ns,
                    "steady clock, relative to the ledger's creation (Ledger.epoch_ns)")
      .def_readonly("thread", &gb::Event::thread, "small per-process thread index");
  py::class_<gb::Aggregate, gb::EventSite>(m, "Aggregate", "The events of one site, summed (never dropped).")
      .def_readonly("total_ns", &gb::Aggregate::total_ns)
      .def_readonly("max_ns", &gb::Aggregate::max_ns);
  py::class_<gb::KindTotals>(m, "KindTotals", "Counts and total durations per Kind, at one moment.")
      .def(
          "count", [](const gb::KindTotals& t, gb::Kind k) { return t.count[static_cast<int>(k)]; },
          py::arg("kind"))
      .def(
          "total_ns", [](const gb::KindTotals& t, gb::Kind k) { return t.total_ns[static_cast<int>(k)]; },
          py::arg("kind"));

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
      .def("totals", &gb::Ledger::Totals, "every Kind's count and total duration, read at once")
      .def("aggregates", &gb::Ledger::Aggregates, "one row per site, by kind, then by count (largest first)")
      .def("recent_events", &gb::Ledger::RecentEvents, "the bounded ring's events, oldest first")
      .def_property_readonly("events_recorded", &gb::Ledger::events_recorded)
      .def_property_readonly("ring_capacity", &gb::Ledger::ring_capacity)
      .def_property_readonly("epoch_ns", &gb::Ledger::epoch_ns,
                             "steady clock (time.monotonic_ns() on Linux) at creation; event timestamps add to it")
      .def_property_readonly("memory_bytes", &gb::Ledger::MemoryBytes);

  py::class_<Tap, std::shared_ptr<Tap>>(m, "Tap", py::custom_type_setup([](PyHeapTypeObject* heap_type) {
                                         auto* type = &heap_type->ht_type;
                                         type->tp_flags |= Py_TPFLAGS_HAVE_GC;
                                         type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) {
                                           Py_VISIT(Py_TYPE(self));
                                           if (!py::detail::is_holder_constructed(self)) return 0;
                                           return py::cast<const Tap&>(py::handle(self)).Traverse(visit, arg);
                                         };
                                         type->tp_clear = [](PyObject* self) {
                                           if (py::detail::is_holder_constructed(self)) {
                                             py::cast<Tap&>(py::handle(self)).Clear();
                                           }
                                           return 0;
                                         };
                                       }))
      .def(py::init<py::object, const std::string&, py::object, py::object, py::object, py::object, py::object>(),
           py::arg("original"), py::arg("mode"), py::arg("replica_fn") = py::none(),
           py::arg("counter_value") = py::none(), py::arg("on_error") = py::none(), py::arg("before") = py::none(),
           py::arg("after") = py::none())
      .def("stand_in", [](py::object self) { return MakeStandIn(self); },
           "The callable to put in place of the original: calls it and records into the ledgers.")
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
