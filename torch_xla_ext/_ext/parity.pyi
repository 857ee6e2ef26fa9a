from __future__ import annotations
import torch_xla_ext._ext.graph
__all__: list[str] = ['find_rounding_points', 'is_narrow_float', 'op_class']
def find_rounding_points(graph: torch_xla_ext._ext.graph.Graph, excess_precision: bool = True) -> dict:
    """
    Rounding points of one function's graph (a graph.Graph). See cc/parity/rounding.h.
    """
def is_narrow_float(element_type: str) -> bool:
    """
    Whether XLA:CPU computes this element type in f32 and rounds back (bf16, f16).
    """
def op_class(name: str) -> str:
    """
    What an op does to its values: moves_data, exact, opaque or computes.
    """
