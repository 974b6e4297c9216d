import math

import pytest
import torch

from gptlib import sinusoidal_positions


def test_shape_and_dtype():
    table = sinusoidal_positions(8, 16)
    assert table.shape == (8, 16)
    assert table.dtype == torch.float32


def test_first_rows_known_values():
    table = sinusoidal_positions(3, 4)
    # frequencies 1 and 10000 ** (-2 / 4) = 0.01; columns sin, cos, sin, cos
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
            [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)],
        ]
    )
    torch.testing.assert_close(table, expected)


def test_sin_in_even_columns_cos_in_odd_columns():
    d = 16
    table = sinusoidal_positions(50, d)
    pos = torch.arange(50, dtype=torch.float64)[:, None]
    for i in range(d // 2):
        w = 10000.0 ** (-2 * i / d)
        torch.testing.assert_close(
            table[:, 2 * i].double(), (pos[:, 0] * w).sin(), atol=1e-6, rtol=0
        )
        torch.testing.assert_close(
            table[:, 2 * i + 1].double(), (pos[:, 0] * w).cos(), atol=1e-6, rtol=0
        )


def test_range_and_row_length():
    table = sinusoidal_positions(1000, 32)
    assert table.abs().max().item() <= 1.0
    torch.testing.assert_close(table.norm(dim=1), torch.full((1000,), math.sqrt(16.0)))


def test_dot_product_depends_only_on_the_offset():
    table = sinusoidal_positions(40, 16).double()
    dots = table @ table.T
    for offset in range(5):
        diag = dots.diagonal(offset)
        assert (diag - diag[0]).abs().max().item() < 1e-5


def test_longer_table_extends_the_shorter():
    torch.testing.assert_close(sinusoidal_positions(100, 8)[:8], sinusoidal_positions(8, 8))


@pytest.mark.parametrize(("n", "d"), [(8, 15), (8, 0), (0, 16)])
def test_bad_sizes_are_refused(n, d):
    with pytest.raises(ValueError):
        sinusoidal_positions(n, d)
