"""Each value checked once per command on a least-squares (regression) problem: the validity command, and the exact
least-squares laws taking a Schedule and a ClientSampling whole (the counter is tests/test_params.py's)."""

from pathlib import Path

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.exact import (
    least_squares_round_law,
    least_squares_sde,
    least_squares_stationary_law,
    least_squares_transient_moments,
)
from fedsde.params import ClientSampling, Schedule
from fedsde.problems import load_problem
from tests.test_params import CHECKED_ONCE, _count_validations

MY_DATA = Path(__file__).resolve().parents[1] / "examples" / "problems" / "my_data.toml"
#: the problem file's keys, checked once where the problem is built (the command trusts a built problem)
FILE_KEYS = ("batch_size", "sampling", "l2")


@pytest.fixture(scope="module")
def reg():
    return load_problem(MY_DATA)


@pytest.mark.parametrize("fedavg", ["exact", "sampled"])
def test_a_regression_validity_command_checks_each_value_once(monkeypatch, capsys, fedavg):
    argv = ["validity", "--problem", str(MY_DATA), "--eta", "0.05", "--local-steps", "2", "--rounds", "3",
            "--replicates", "8", "--seed", "1", "--fedavg", fedavg, "--json"]
    assert main(argv) == 0  # everything the command imports, imported
    capsys.readouterr()
    counts = _count_validations(monkeypatch)
    assert main(argv) == 0
    capsys.readouterr()
    once = (*CHECKED_ONCE, *FILE_KEYS)
    assert {k: counts[k] for k in once} == dict.fromkeys(once, 1), counts
    assert counts["device_dtype"] == 1
    # no client sampling asked for: nothing of it read, nor a method of the exact laws given
    assert counts["weighting"] == counts["participation"] == counts["weights"] == 0, counts
    assert counts["method"] <= 1 and counts["h"] == 0, counts


def test_the_exact_laws_check_the_client_sampling_once_where_it_is_read(reg, monkeypatch):
    counts = _count_validations(monkeypatch)
    least_squares_transient_moments(reg, 0.05, 2, 80, 0.5, participation=2, weighting="renormalised", w0=0.1,
                                    record=[0, 80])
    once = ("eta", "local_steps", "rounds", "server_lr", "participation", "weighting", "start_point", "record")
    assert {k: counts[k] for k in once} == dict.fromkeys(once, 1), counts
    counts.clear()
    least_squares_sde(reg, 0.05, 2, 0.5, participation=2, weighting="unbiased")
    once = ("eta", "server_lr", "participation", "weighting")
    assert {k: counts[k] for k in once} == dict.fromkeys(once, 1), counts
    assert counts["local_steps"] == 2, counts  # raw steps: client_steps, whose entry check counts too
    s, clients = Schedule(0.05, 2, 0, 0.5), ClientSampling(2, "multinomial")
    counts.clear()
    least_squares_stationary_law(reg, s, clients=clients)
    least_squares_sde(reg, s, clients=clients)
    assert not {k: v for k, v in counts.items() if k != "method"}, counts  # values handed whole: trusted


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_exact_laws_take_the_values_whole_and_give_the_same_numbers(reg):
    s, clients = Schedule(0.05, [2, 3, 1], 0, 0.7, h=0.1), ClientSampling(2, "renormalised")
    old = least_squares_round_law(reg, 0.05, [2, 3, 1], 0.7, participation=2, weighting="renormalised")
    new = least_squares_round_law(reg, s, clients=clients)
    for f in ("mu", "C", "J", "local_steps"):
        _same(getattr(old, f), getattr(new, f))
    assert (old.eta, old.server_lr, old.participation, old.weighting) == (new.eta, new.server_lr, 2, "renormalised")
    _same(least_squares_sde(reg, 0.05, [2, 3, 1], 0.7, 0.1, participation=2).generator(),
          least_squares_sde(reg, s, clients=ClientSampling(2)).generator())
    a = least_squares_stationary_law(reg, 0.05, 2, 0.5, participation=2, weighting="multinomial")
    b = least_squares_stationary_law(reg, Schedule(0.05, 2, 0, 0.5), clients=ClientSampling(2, "multinomial"))
    _same(a.cov, b.cov)
    _same(a.mean, b.mean)
    c = least_squares_transient_moments(reg, 0.05, 2, 5, 0.5, participation=2, record=[5])
    d = least_squares_transient_moments(reg, Schedule(0.05, 2, 5, 0.5), clients=ClientSampling(2), record=[5])
    _same(c.cov, d.cov)


def test_raw_input_to_the_exact_laws_is_still_checked(reg):
    from fedsde.errors import FedsdeInputError

    with pytest.raises(FedsdeInputError, match="eta=-1: must be finite and > 0"):
        least_squares_round_law(reg, -1, 2)
    with pytest.raises(FedsdeInputError, match=r"local_steps\[1\]=0: must be an integer >= 1"):
        least_squares_sde(reg, 0.05, [2, 0, 1])
    with pytest.raises(FedsdeInputError, match="weighting='x': must be one of"):
        least_squares_stationary_law(reg, 0.05, 2, participation=2, weighting="x")
    with pytest.raises(FedsdeInputError, match="participation=5: cannot exceed the number of clients Q=3"):
        least_squares_transient_moments(reg, 0.05, 2, 3, participation=5)
    with pytest.raises(FedsdeInputError, match="participation= and clients= both given"):
        least_squares_round_law(reg, 0.05, 2, participation=2, clients=ClientSampling(2))
    with pytest.raises(FedsdeInputError, match="sampling='x': must be one of"):
        reg.noise_factors(sampling="x")


def test_the_default_oracle_takes_the_problems_own_minibatches_and_records_them(reg):
    from fedsde.clients.least_squares_oracle import least_squares_oracle
    from fedsde.sde.svag import default_oracle_factory

    own = default_oracle_factory(reg)
    assert own.describe == least_squares_oracle(reg.batch_size, reg.sampling).describe
    oracle = own(reg, 1, "cpu", None)
    assert (oracle.fixed_batch, oracle.replace) == (reg.batch_size, reg.sampling == "with-replacement")
