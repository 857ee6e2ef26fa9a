// Bindings of cc/numerics: the comparator takes raw buffers (address, dtype, shape, strides in
// elements) so torch tensors, numpy arrays and ml_dtypes bfloat16 arrays all pass without a copy.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <vector>

#include "cc/numerics/compare.h"
#include "torch_xla_ext/csrc/status_casters.h"
#include "torch_xla_ext/csrc/submodules.h"

namespace py = pybind11;
using txe::numerics::CompareResult;
using txe::numerics::DType;
using txe::numerics::TensorView;

TXE_PYBIND_SUBMODULE(numerics, m) {
  py::enum_<DType>(m, "DType")
      .value("float64", DType::kFloat64)
      .value("float32", DType::kFloat32)
      .value("bfloat16", DType::kBFloat16)
      .value("float16", DType::kFloat16);

  py::class_<CompareResult>(m, "CompareResult")
      .def_readonly("total", &CompareResult::total)
      .def_readonly("mismatched", &CompareResult::mismatched)
      .def_readonly("max_abs_diff", &CompareResult::max_abs_diff)
      .def_readonly("max_abs_index", &CompareResult::max_abs_index)
      .def_readonly("max_rel_diff", &CompareResult::max_rel_diff)
      .def_readonly("max_rel_index", &CompareResult::max_rel_index)
      .def_readonly("max_abs_diff_all", &CompareResult::max_abs_diff_all)
      .def_readonly("max_abs_index_all", &CompareResult::max_abs_index_all)
      .def_readonly("max_rel_diff_all", &CompareResult::max_rel_diff_all)
      .def_readonly("max_rel_index_all", &CompareResult::max_rel_index_all)
      .def_readonly("ulp_dtype", &CompareResult::ulp_dtype)
      .def_readonly("max_ulp", &CompareResult::max_ulp)
      .def_readonly("max_ulp_index", &CompareResult::max_ulp_index)
      .def_readonly("ulp_undefined", &CompareResult::ulp_undefined)
      .def_readonly("ulp_histogram", &CompareResult::ulp_histogram)
      .def_readonly("num_threads", &CompareResult::num_threads);

  m.def("ulp_bucket_labels", [] {
    std::vector<std::string> labels;
    for (int b = 0; b < txe::numerics::kUlpBuckets; ++b) labels.push_back(txe::numerics::UlpBucketLabel(b));
    return labels;
  });

  m.def(
      "compare",
      [](std::uintptr_t a_data, DType a_dtype, std::vector<int64_t> a_shape,
         std::vector<int64_t> a_strides, std::uintptr_t e_data, DType e_dtype,
         std::vector<int64_t> e_shape, std::vector<int64_t> e_strides, double rtol, double atol,
         bool equal_nan, int num_threads) {
        TensorView a{reinterpret_cast<const void*>(a_data), a_dtype, std::move(a_shape), std::move(a_strides)};
        TensorView e{reinterpret_cast<const void*>(e_data), e_dtype, std::move(e_shape), std::move(e_strides)};
        txe::StatusOr<CompareResult> result = txe::InternalError("not run");
        {
          py::gil_scoped_release release;  // the scan touches no Python object
          result = txe::numerics::Compare(a, e, {rtol, atol, equal_nan, num_threads});
        }
        return txe::python::ValueOrThrow(std::move(result));
      },
      py::arg("actual_data"), py::arg("actual_dtype"), py::arg("actual_shape"),
      py::arg("actual_strides"), py::arg("expected_data"), py::arg("expected_dtype"),
      py::arg("expected_shape"), py::arg("expected_strides"), py::arg("rtol"), py::arg("atol"),
      py::arg("equal_nan"), py::arg("num_threads") = 0,
      "Compares two strided buffers; the caller keeps them alive. See cc/numerics/compare.h.");
}
