"""Tests for exactspec.fields: fraction (exact), mpmath (arbitrary precision) and float fields."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction as F

import mpmath
import pytest

import exactspec as es
from exactspec import fields
from exactspec.instances import make_instance


def _audit(inst, rule, **kw):
    return es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt,
                    tokens=inst.tokens, rule=rule, **kw)


def _mpf_to_fraction(x) -> F:
    """The exact rational value of a finite mpmath number (sign, mantissa, exponent)."""
    sign, man, exp, _bc = x._mpf_
    assert mpmath.isfinite(x)
    return F((-1) ** sign * int(man)) * F(2) ** exp


def _exact(x) -> F:
    """The exact rational value of a float, mpf or Fraction."""
    if isinstance(x, float):
        return F(x)  # a float is a rational: exact conversion
    if isinstance(x, (int, F)):
        return F(x)
    return _mpf_to_fraction(x)


# -- get_field --------------------------------------------------------------------------------------
def test_get_field_names():
    f = es.get_field("fraction")
    assert isinstance(f, fields.FractionField) and f.name == "fraction" and f.exact
    assert f.tolerance() == 0
    m = es.get_field("mpmath")
    assert isinstance(m, fields.MpmathField) and m.name == "mpmath" and not m.exact
    assert m.precision == 113  # default: quad precision
    assert es.get_field("mpmath", precision=200).precision == 200
    fl = es.get_field("float")
    assert isinstance(fl, fields.FloatField) and fl.name == "float" and not fl.exact
    assert fl.tolerance() == 1e-12
    assert es.get_field("float", tolerance=1e-9).tolerance() == 1e-9
    assert es.get_field().name == "fraction"  # default field
    assert es.get_field(m) is m  # a Field is passed through


@pytest.mark.parametrize("call, message", [
    (lambda: es.get_field("decimal"), "unknown field 'decimal': choose one of fraction, mpmath, float"),
    (lambda: es.get_field("fraction", tolerance=F(1, 10)), "the fraction field is exact: its tolerance is 0"),
    (lambda: es.get_field("mpmath", precision=8), "mpmath precision must be an int >= 16 bits, got 8"),
    (lambda: es.get_field("mpmath", precision=64.0), "mpmath precision must be an int"),
])
def test_get_field_bad_arguments(call, message):
    with pytest.raises(es.ExactSpecError, match=message):
        call()


def test_fraction_field_refuses_floats():
    f = es.get_field("fraction")
    assert f.check(F(1, 3), "p") == F(1, 3)
    assert f.check(1, "p") == 1
    with pytest.raises(es.InexactArithmetic, match=r"a probability is the float 0.5 \(from .*\); the fraction field is exact"):
        f.check(0.5, "a probability")
    with pytest.raises(es.InexactArithmetic, match="of type str"):
        f.check("1/2", "p")


def test_float_in_a_rule_is_refused_and_names_the_rule_line():
    def float_rule(step, rng):
        x = step.draft(0)
        if rng.bernoulli(0.5):  # a float reaching exact arithmetic
            yield x
        else:
            yield 1 - x

    with pytest.raises(es.InexactArithmetic, match=r"is the float 0.5 \(from .*test_fields.py:\d+ in float_rule\)"):
        es.audit(target=es.models.context_free(("1/2", "1/2")), draft=es.models.context_free(("1/2", "1/2")),
                 proposer=es.drafts.chain(1), rule=float_rule, tokens=1)


def test_field_conversions():
    third = F(1, 3)
    assert es.get_field("fraction").convert(third) == third
    assert es.get_field("float").convert(F(1, 4)) == 0.25
    m64 = es.get_field("mpmath", precision=64)
    x = m64.convert(third)
    # 1/3 rounded to a 64-bit mantissa: within half an ulp, 2**-66, of the exact value
    assert abs(_exact(x) - third) <= F(1, 2 ** 66)
    m256 = es.get_field("mpmath", precision=256)
    assert abs(_exact(m256.convert(third)) - third) <= F(1, 2 ** 258)
    # fraction field text is exact "p/q" and round-trips
    ff = es.get_field("fraction")
    assert ff.to_str(F(3, 5)) == "3/5" and ff.to_str(F(2)) == "2"
    assert ff.parse("3/5") == F(3, 5)


# -- mpmath precision vs the tiny_clamp_residual bias ------------------------------------------------
TINY_INSTANCE = dict(vocab=3, order=1, gamma=2, tokens=2)


def test_tiny_clamp_is_biased_by_about_1e_38_in_the_fraction_field():
    r = _audit(make_instance(**TINY_INSTANCE), es.rules.tiny_clamp_residual)
    assert type(r.tv) is F
    # the clamp adds mass of order 2**-126 ~ 1.2e-38: TV is positive but tiny
    assert F(1, 10 ** 38) < r.tv < F(1, 10 ** 37)
    assert not r.lossless and r.verdict == "biased" and r.claim_holds


@pytest.mark.parametrize("precision", [64, 113])
def test_tiny_clamp_reads_lossless_at_low_mpmath_precision(precision):
    r = _audit(make_instance(**TINY_INSTANCE), es.rules.tiny_clamp_residual, field="mpmath", precision=precision)
    # stated tolerance: 2**(16 - precision) (2**-97 ~ 6.3e-30 at 113 bits)
    assert r.tolerance == r.field.ctx.mpf(2) ** (16 - precision)
    assert r.tv <= r.tolerance
    assert r.lossless and r.verdict == "lossless"
    # the rule claims to be biased, and at this precision the bias is invisible: the claim reads broken
    assert not r.claim_holds


def test_tiny_clamp_reads_biased_at_256_bits_and_matches_exact_tv():
    inst = make_instance(**TINY_INSTANCE)
    exact = _audit(inst, es.rules.tiny_clamp_residual).tv
    r = _audit(inst, es.rules.tiny_clamp_residual, field="mpmath", precision=256)
    assert r.tolerance == r.field.ctx.mpf(2) ** (16 - 256)   # ~5.7e-73
    assert r.tv > r.tolerance
    assert not r.lossless and r.verdict == "biased" and r.claim_holds
    # 256-bit arithmetic on numbers <= 1 keeps the ~2e-38 TV to far better than 2**-200 absolute
    assert abs(_exact(r.tv) - exact) <= F(1, 2 ** 200)


def test_tiny_clamp_reads_lossless_in_float_field():
    r = _audit(make_instance(**TINY_INSTANCE), es.rules.tiny_clamp_residual, field="float")
    assert r.tolerance == 1e-12
    assert isinstance(r.tv, float) and r.tv <= 1e-12
    assert r.lossless and not r.claim_holds   # the float field cannot see a 1e-38 bias


# -- float / mpmath agree with the fraction field ----------------------------------------------------
AGREE_INSTANCES = [
    dict(vocab=3, order=1, gamma=2, tokens=2, seed=0),
    dict(vocab=3, order=1, gamma=3, tokens=3, seed=4),
    dict(vocab=4, order=2, gamma=2, tokens=2, seed=2),
]


@pytest.mark.parametrize("kw", AGREE_INSTANCES, ids=lambda kw: "v{vocab}o{order}g{gamma}t{tokens}s{seed}".format(**kw))
@pytest.mark.parametrize("field, precision, tol", [
    ("float", None, F(1e-12)),                # FloatField default tolerance 1e-12 (the float, exactly)
    ("mpmath", 113, F(1, 2 ** 97)),           # 2**(16 - 113)
    ("mpmath", 64, F(1, 2 ** 48)),            # 2**(16 - 64)
])
def test_inexact_fields_agree_with_fraction_within_tolerance(kw, field, precision, tol):
    inst = make_instance(**kw)
    exact = _audit(inst, es.rules.speculative_sampling)
    assert exact.tv == 0 and exact.lossless
    r = _audit(inst, es.rules.speculative_sampling, field=field, precision=precision)
    assert _exact(r.tolerance) == tol
    assert set(r.output) == set(exact.output)
    for k, v in exact.output.items():
        assert abs(_exact(r.output[k]) - v) <= tol, (k, r.output[k], v)
    for k, v in exact.expected.items():
        assert abs(_exact(r.expected[k]) - v) <= tol, (k, r.expected[k], v)
    assert abs(_exact(r.tokens_per_call) - exact.tokens_per_call) <= tol
    assert abs(_exact(r.target_calls) - exact.target_calls) <= tol
    assert 0 <= _exact(r.tv) <= tol and r.lossless


# -- stated tolerance --------------------------------------------------------------------------------
def test_report_states_tolerance():
    inst = make_instance(vocab=2, order=1, gamma=1, tokens=1)
    rf = _audit(inst, es.rules.speculative_sampling)
    assert rf.tolerance == 0
    assert rf.field.describe() == "fraction (exact rationals; lossless means TV == 0 exactly)"

    rfl = _audit(inst, es.rules.speculative_sampling, field="float")
    assert rfl.tolerance == 1e-12
    assert rfl.field.describe() == "float (float64; lossless means TV <= 1e-12)"
    rfl9 = _audit(inst, es.rules.speculative_sampling, field="float", tolerance=1e-9)
    assert rfl9.tolerance == 1e-9 and "TV <= 1e-09" in rfl9.field.describe()

    rm = _audit(inst, es.rules.speculative_sampling, field="mpmath")
    assert _exact(rm.tolerance) == F(1, 2 ** 97)
    # 2**-97 = 6.310887...e-30, shown to 6 digits
    assert rm.field.describe() == "mpmath (113-bit; lossless means TV <= 6.31089e-30)"
    rm200 = _audit(inst, es.rules.speculative_sampling, field="mpmath", precision=200, tolerance=2.0 ** -100)
    assert _exact(rm200.tolerance) == F(1, 2 ** 100)
    assert "200-bit" in rm200.field.describe()
    # the summary repeats the field's statement of its tolerance
    for r in (rf, rfl, rm):
        assert r.field.describe() in r.summary()


# -- exactness of the fraction field -----------------------------------------------------------------
@pytest.mark.parametrize("rule", es.rules.catalog(), ids=lambda r: r.name)
@pytest.mark.parametrize("closed_form", [True, False], ids=["closed_form", "enumerated"])
def test_fraction_field_values_are_fractions_never_float(rule, closed_form):
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2, seed=1)
    if rule.family == "tree":
        inst = dataclasses.replace(inst, proposer=es.drafts.tree((2, 1), children="topk", claim="point_mass"))
    r = _audit(inst, rule, closed_form=closed_form)
    for law in (r.output, r.expected):
        assert law and all(type(v) is F for v in law.values())
        assert sum(law.values()) == 1   # exact: a law of the first 2 tokens
    assert type(r.tv) is F
    assert type(r.tokens_per_call) is F
    # target_calls is an exact rational (int 1 when one call always suffices), never a float
    assert isinstance(r.target_calls, (int, F)) and not isinstance(r.target_calls, (bool, float))
    assert r.tolerance == 0


def test_float_field_values_are_floats():
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    r = _audit(inst, es.rules.speculative_sampling, field="float")
    assert all(type(v) is float and math.isfinite(v) for v in r.output.values())
    assert abs(sum(r.output.values()) - 1) <= 1e-12


def test_mpmath_field_accepts_an_exact_rational_tolerance():
    # Fractions are exactspec's own numbers: a rational tolerance must be accepted (exactly)
    f = es.get_field("mpmath", precision=200, tolerance=F(1, 2 ** 100))
    assert _exact(f.tolerance()) == F(1, 2 ** 100)


def test_an_mpq_is_exported_as_the_fraction_it_equals():
    gmpy2 = pytest.importorskip("gmpy2")
    fld = fields.get_field(backend="gmpy2")
    for x in (gmpy2.mpq(3, 5), gmpy2.mpq(-7, 2 ** 130 + 1), gmpy2.mpq(0), gmpy2.mpq(12, 4)):
        f = fld.export(x)
        want = F(int(x.numerator), int(x.denominator))
        assert type(f) is F and f == want and hash(f) == hash(want) and repr(f) == repr(want)
        assert (f.numerator, f.denominator) == (want.numerator, want.denominator)
        assert f + F(1, 3) == want + F(1, 3) and str(f) == str(want)


def test_mpmath_fields_numbers_and_reports_pickle_so_workers_can_send_them_back():
    # `exactspec check --field mpmath` on its default workers exited 2 ("Can't pickle <class
    # 'mpmath.ctx_mp_python.mpf'>: it's not the same object"): each field's private context has its own number type
    import pickle
    f = fields.get_field("mpmath", precision=80, tolerance=F(1, 10 ** 9))
    g = pickle.loads(pickle.dumps(f))
    assert (g.precision, g.tolerance(), g.one, g.zero) == (80, f.tolerance(), 1, 0)
    third = f.convert(F(1, 3))
    back = pickle.loads(pickle.dumps(third))
    assert back == third and back.context.prec == 80 and back._mpf_ == third._mpf_
    assert pickle.loads(pickle.dumps(g.convert(F(1, 3)))) == third     # a rebuilt field's numbers pickle too
    m = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    r = es.audit(target=m.target, draft=m.draft, proposer=m.proposer, prompt=m.prompt, tokens=2,
                 rule="speculative_sampling", field="mpmath", progress=False)
    r2 = pickle.loads(pickle.dumps(r))
    assert (r2.tv, r2.verdict, r2.output, r2.summary()) == (r.tv, r.verdict, r.output, r.summary())


@pytest.mark.slow
def test_check_in_the_mpmath_field_on_workers_prints_what_it_prints_in_process(capsys):
    from exactspec.cli import main
    argv = ["check", "--field", "mpmath", "--json", "--no-timings", "--quiet"]
    code = main(argv + ["--workers", "2"])
    on_workers = capsys.readouterr().out
    assert main(argv + ["--workers", "1"]) == code == 3       # mpmath: lossless within a tolerance is undecided
    assert capsys.readouterr().out == on_workers
