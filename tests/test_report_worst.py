"""AuditReport.worst with its float screen: the same list as ranking every exact difference."""

from fractions import Fraction as F

from hypothesis import given, settings, strategies as st

import exactspec as es
from exactspec.report import AuditReport
from exactspec.fields import get_field


def ranked(out, exp, n):
    """The n largest |out - exp| by exact Fractions, ties by tokens: the definition, computed plainly."""
    keys = set(out) | set(exp)
    rows = sorted(((k, out.get(k, 0), exp.get(k, 0)) for k in keys), key=lambda r: (-abs(r[1] - r[2]), r[0]))
    return [es.Outcome(*r) for r in rows if r[1] != r[2]][:n]


def report(out, exp, n):
    return AuditReport(rule="r", claim="lossless", instance={}, field=get_field("fraction"), output=out,
                       expected=exp, tv=F(0), tolerance=0, worst_count=n, tokens_per_call=F(1), target_calls=F(1))


# values on a coarse grid (ties), near-equal pairs that round to the same float, and ints
values = st.one_of(st.fractions(min_value=0, max_value=1, max_denominator=12),
                   st.integers(0, 1),
                   st.builds(lambda i: F(1, 3) + F(i, 10 ** 30), st.integers(-3, 3)),
                   st.builds(lambda i: F(i, 10 ** 400), st.integers(0, 3)))


@settings(max_examples=200, deadline=None)
@given(out=st.dictionaries(st.tuples(st.integers(0, 5), st.integers(0, 5)), values, max_size=36),
       exp=st.dictionaries(st.tuples(st.integers(0, 5), st.integers(0, 5)), values, max_size=36),
       n=st.integers(0, 6))
def test_worst_equals_the_plain_ranking(out, exp, n):
    assert report(out, exp, n).worst == ranked(out, exp, n)


def test_worst_on_near_ties_below_float_resolution():
    # 40 differences that round to one float, and below float range: the exact order still decides
    out = {(i,): F(1, 3) + F(i, 10 ** 40) for i in range(40)} | {(100 + i,): F(i + 1, 10 ** 400) for i in range(40)}
    exp = {(i,): F(1, 3) for i in range(40)}
    for n in (1, 3, 10):
        assert report(out, exp, n).worst == ranked(out, exp, n)


def test_worst_with_mixed_value_types_falls_back():
    out = {(i,): 0.5 if i == 0 else F(i, 50) for i in range(30)}
    exp = {(i,): F(1, 4) for i in range(30)}
    assert report(out, exp, 3).worst == ranked(out, exp, 3)
