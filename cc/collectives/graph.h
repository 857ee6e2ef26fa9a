// The collectives analysis reads the project's one value-graph representation of a StableHLO
// function, cc/graph/graph.h (shared with the rounding-point analysis of cc/parity). These names
// keep code written against txe::collectives::{TensorType, Op, Graph} compiling.
#ifndef TXE_CC_COLLECTIVES_GRAPH_H_
#define TXE_CC_COLLECTIVES_GRAPH_H_

#include "cc/graph/graph.h"

namespace txe::collectives {

using ::txe::graph::Graph;
using ::txe::graph::Op;
using ::txe::graph::TensorType;

}  // namespace txe::collectives

#endif  // TXE_CC_COLLECTIVES_GRAPH_H_
