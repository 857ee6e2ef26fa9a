"""A straightforward numpy statement of what the comparator computes, for property tests."""

import numpy as np

_UINT = {8: np.uint64, 4: np.uint32, 2: np.uint16}


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    names = {a.name, b.name}
    if len(names) == 1:
        return a
    if "float64" in names:
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def _ordered(x: np.ndarray) -> np.ndarray:
    bits = x.view(_UINT[x.dtype.itemsize]).astype(np.uint64)
    sign_bit = np.uint64(1) << np.uint64(8 * x.dtype.itemsize - 1)
    mag = (bits & ~sign_bit).astype(object)  # python ints: no overflow in differences
    return np.where(bits & sign_bit, -mag, mag)


def _first_argmax(values: np.ndarray, mask: np.ndarray) -> int:
    """torch.max's pick over `mask`: NaN outranks all, first occurrence wins; -1 if empty."""
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return -1
    v = values[idx]
    nans = np.flatnonzero(np.isnan(v))
    if nans.size:
        return int(idx[nans[0]])
    return int(idx[int(np.argmax(v))])


def reference(a: np.ndarray, e: np.ndarray, rtol: float, atol: float, equal_nan: bool) -> dict:
    a64 = a.astype(np.float64).ravel()
    e64 = e.astype(np.float64).ravel()
    with np.errstate(all="ignore"):
        both_nan = np.isnan(a64) & np.isnan(e64)
        identical = (a64 == e64) | (equal_nan & both_nan)
        abs_diff = np.where(identical, 0.0, np.abs(a64 - e64))
        rel_diff = np.where(identical, 0.0, abs_diff / np.abs(e64))
        close = identical | (np.isfinite(abs_diff) & (abs_diff <= atol + np.abs(rtol * e64)))
    mism = ~close
    everything = np.ones_like(mism)
    out = {
        "total": a64.size,
        "mismatched": int(mism.sum()),
        "max_abs_index": _first_argmax(abs_diff, mism),
        "max_rel_index": _first_argmax(rel_diff, mism),
        "max_abs_index_all": _first_argmax(abs_diff, everything),
        "max_rel_index_all": _first_argmax(rel_diff, everything),
        "abs_diff": abs_diff,
        "rel_diff": rel_diff,
    }
    u = promote(a.dtype, e.dtype)
    au = a.astype(u).ravel()
    eu = e.astype(u).ravel()
    any_nan = np.isnan(a64) | np.isnan(e64)
    defined = ~any_nan | (equal_nan & both_nan)
    dist = np.zeros(a64.size, dtype=object)
    ok = ~any_nan
    if ok.any():
        dist[ok] = np.abs(_ordered(au[ok]) - _ordered(eu[ok]))
    out["ulp_undefined"] = int((~defined).sum())
    out["max_ulp"] = int(max(dist[defined], default=0))
    hist = [0] * 12
    for d in dist[defined]:
        hist[0 if d == 0 else min(int(d).bit_length(), 11)] += 1
    out["ulp_histogram"] = hist
    return out
