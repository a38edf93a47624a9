"""Grid arithmetic for the host side of a launch, in plain integers: `triton.cdiv` is a constexpr function in
recent Triton (microseconds a call), and a launch path computes several of these on every call."""


def cdiv(a: int, b: int) -> int:
    """a / b rounded up, for a >= 0 and b > 0."""
    return -(-a // b)
