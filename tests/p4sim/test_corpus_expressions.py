"""Corpus programs on P4_16 expression semantics: wrap-around and saturating
arithmetic (unsigned and signed), signed versus unsigned comparison, casts that
extend and truncate, slices, concatenation and shifts.

Each program answers on the port the request came in on; the expected answer is
computed here in Python from the P4_16 spec's rules for operations on bit<W> and int<W>.
"""
from __future__ import annotations

import pytest
from scapy.fields import BitField, ByteField, IntField, ShortField
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from tests.p4sim.oracles import H1_MAC, H2_MAC, PAYLOAD

ETHERTYPE = 0x88B6


def signed(value: int, width: int) -> int:
    return value - (1 << width) if value >> (width - 1) else value


def clamp(value: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, value))


def answer(sw, request: Packet, expected: Packet, port: int = 3) -> None:
    sent = Ether(dst=H2_MAC, src=H1_MAC, type=ETHERTYPE) / request / PAYLOAD
    want = Ether(dst=H2_MAC, src=H1_MAC, type=ETHERTYPE) / expected / PAYLOAD
    assert sw.process(port, bytes(sent)) == [(port, bytes(want))]


# --- saturating.p4 -------------------------------------------------------------------------

class Arith(Packet):
    name = "Arith"
    fields_desc = [ByteField(n, 0) for n in ("a", "b", "add_wrap", "sub_wrap", "add_sat", "sub_sat",
                                             "signed_add_sat", "signed_sub_sat")]


@pytest.mark.parametrize("a,b", [(3, 4), (200, 100), (100, 200), (0x7F, 1), (0x80, 0xFF), (0x80, 1),
                                 (0xFF, 0xFF), (0, 0)])
def test_saturating_ops_clamp_where_plain_ops_wrap(make_switch, a, b):
    sw = make_switch("saturating")
    sa, sb = signed(a, 8), signed(b, 8)
    expected = Arith(a=a, b=b, add_wrap=(a + b) % 256, sub_wrap=(a - b) % 256,
                     add_sat=min(a + b, 255), sub_sat=max(a - b, 0),
                     signed_add_sat=clamp(sa + sb, -128, 127) % 256,
                     signed_sub_sat=clamp(sa - sb, -128, 127) % 256)
    answer(sw, Arith(a=a, b=b), expected)


def test_saturating_drops_other_ethertypes(make_switch):
    sw = make_switch("saturating")
    assert sw.process(1, bytes(Ether(dst=H2_MAC, src=H1_MAC, type=0x0800) / PAYLOAD)) == []


# --- signed_compare.p4 ---------------------------------------------------------------------

FLAGS = ("unsigned_lt", "unsigned_ge", "signed_lt", "signed_le", "signed_gt", "signed_ge", "equal",
         "not_equal")


class Cmp(Packet):
    name = "Cmp"
    fields_desc = [ShortField("a", 0), ShortField("b", 0)] + [BitField(f, 0, 1) for f in FLAGS] + \
        [ShortField("signed_max", 0), ShortField("signed_min", 0)]


@pytest.mark.parametrize("a,b", [(1, 2), (0x8000, 1), (1, 0x8000), (0xFFFF, 0), (0xFFFF, 0xFFFE),
                                 (0x7FFF, 0x8000), (5, 5)])
def test_comparisons_differ_between_unsigned_and_signed_views(make_switch, a, b):
    sw = make_switch("signed_compare")
    sa, sb = signed(a, 16), signed(b, 16)
    flags = dict(unsigned_lt=a < b, unsigned_ge=a >= b, signed_lt=sa < sb, signed_le=sa <= sb,
                 signed_gt=sa > sb, signed_ge=sa >= sb, equal=a == b, not_equal=a != b)
    expected = Cmp(a=a, b=b, signed_max=max(sa, sb) % 65536, signed_min=min(sa, sb) % 65536,
                   **{k: int(v) for k, v in flags.items()})
    answer(sw, Cmp(a=a, b=b), expected)


# --- casts.p4 ------------------------------------------------------------------------------

class Cast(Packet):
    name = "Cast"
    fields_desc = [ByteField("x", 0), IntField("zero_extended", 0), IntField("sign_extended", 0),
                   ShortField("sign_extended_16", 0), BitField("low_nibble", 0, 4), BitField("negative", 0, 4)]


@pytest.mark.parametrize("x", [0, 1, 0x7F, 0x80, 0xA5, 0xFF])
def test_casts_zero_extend_sign_extend_and_truncate(make_switch, x):
    sw = make_switch("casts")
    s = signed(x, 8)
    expected = Cast(x=x, zero_extended=x, sign_extended=s % 2**32, sign_extended_16=s % 2**16,
                    low_nibble=x & 0xF, negative=int(s < 0))
    answer(sw, Cast(x=x), expected)


# --- slices_shifts.p4 ----------------------------------------------------------------------

class Bits(Packet):
    name = "Bits"
    fields_desc = [IntField("x", 0), ByteField("n", 0), IntField("swapped", 0), IntField("rotated", 0),
                   IntField("shl", 0), IntField("shr", 0), IntField("sar", 0), ShortField("middle", 0)]


@pytest.mark.parametrize("x,n", [(0x12345678, 0), (0x12345678, 4), (0x80000001, 1), (0x80000001, 31),
                                 (0xDEADBEEF, 32), (0xDEADBEEF, 36), (0x7FFFFFFF, 200), (0xFFFFFFFF, 255)])
def test_slices_concat_and_shifts(make_switch, x, n):
    sw = make_switch("slices_shifts")
    r = n % 32
    mask = 2**32 - 1
    expected = Bits(x=x, n=n, swapped=(x & 0xFFFF) << 16 | x >> 16,
                    rotated=((x << r) | (x >> (32 - r))) & mask,
                    shl=(x << n) & mask, shr=x >> n, sar=(signed(x, 32) >> r) & mask,
                    middle=(x >> 8) & 0xFFFF)
    answer(sw, Bits(x=x, n=n), expected)
