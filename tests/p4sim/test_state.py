"""Table lookup and state errors of p4sim's runtime state, against hand-made tables."""
import pytest

from p4sim.ir import ActionRef, ConstEntry, MatchField, ProgramInfo, RegisterInfo, TableInfo
from p4sim.state import GREEN, RED, YELLOW, Meter, StateError, SwitchState, TableEntry, TableState


def table(*fields: tuple[str, int, str], size: int = 16, **kw) -> TableState:
    info = TableInfo("MyIngress.t", tuple(MatchField(n, w, k) for n, w, k in fields),
                     (ActionRef("MyIngress.fwd"), ActionRef("NoAction")), size=size, **kw)
    return TableState(info)


def test_exact_table_hits_only_its_key():
    t = table(("hdr.a", 8, "exact"), ("hdr.b", 16, "exact"))
    t.insert(TableEntry((("exact", 1), ("exact", 2)), "MyIngress.fwd", (7,)))
    assert t.lookup((1, 2)).args == (7,)
    assert t.lookup((1, 3)) is None


def test_longest_prefix_wins_and_zero_prefix_is_default_route():
    t = table(("hdr.ipv4.dstAddr", 32, "lpm"))
    t.insert(TableEntry((("lpm", 0x0A000000, 8),), "MyIngress.fwd", (1,)))
    t.insert(TableEntry((("lpm", 0x0A000100, 24),), "MyIngress.fwd", (2,)))
    t.insert(TableEntry((("lpm", 0, 0),), "MyIngress.fwd", (3,)))
    assert t.lookup((0x0A000105,)).args == (2,)
    assert t.lookup((0x0A020105,)).args == (1,)
    assert t.lookup((0x0B000001,)).args == (3,)


def test_ternary_highest_priority_wins():
    t = table(("hdr.a", 8, "ternary"), ("hdr.b", 8, "range"))
    t.insert(TableEntry((("ternary", 0x10, 0xF0), None), "MyIngress.fwd", (1,), priority=1))
    t.insert(TableEntry((("ternary", 0x12, 0xFF), ("range", 5, 9)), "MyIngress.fwd", (2,), priority=5))
    assert t.lookup((0x12, 7)).args == (2,)
    assert t.lookup((0x12, 10)).args == (1,)
    assert t.lookup((0x22, 7)) is None


def test_duplicate_insert_and_missing_delete_are_reported():
    t = table(("hdr.a", 8, "exact"))
    t.insert(TableEntry((("exact", 1),), "MyIngress.fwd", (1,)))
    with pytest.raises(StateError) as e:
        t.insert(TableEntry((("exact", 1),), "MyIngress.fwd", (2,)))
    assert e.value.code == "ALREADY_EXISTS"
    with pytest.raises(StateError) as e:
        t.delete((("exact", 9),))
    assert e.value.code == "NOT_FOUND"
    assert t.lookup((1,)).args == (1,)


def test_bad_values_change_nothing():
    t = table(("hdr.a", 8, "ternary"))
    for match, prio, code in [((("ternary", 0x100, 0xFF),), 1, "OUT_OF_RANGE"),
                              ((("ternary", 0x11, 0xF0),), 1, "INVALID_ARGUMENT"),
                              ((("ternary", 0x10, 0xF0),), 0, "INVALID_ARGUMENT")]:
        with pytest.raises(StateError) as e:
            t.insert(TableEntry(match, "MyIngress.fwd", (), priority=prio))
        assert e.value.code == code
    assert t.entries() == []


def test_full_table_is_resource_exhausted():
    t = table(("hdr.a", 8, "exact"), size=1)
    t.insert(TableEntry((("exact", 1),), "MyIngress.fwd"))
    with pytest.raises(StateError) as e:
        t.insert(TableEntry((("exact", 2),), "MyIngress.fwd"))
    assert e.value.code == "RESOURCE_EXHAUSTED"


def test_const_entries_keep_source_order_and_refuse_changes():
    consts = (ConstEntry((("ternary", 1, 0xFF),), "MyIngress.fwd", (1,)),
              ConstEntry((None,), "MyIngress.fwd", (2,)))
    t = table(("hdr.a", 8, "ternary"), const_entries=consts, entries_are_const=True)
    assert t.lookup((1,)).args == (1,)
    assert t.lookup((5,)).args == (2,)
    for change in (lambda: t.insert(TableEntry((("ternary", 3, 0xFF),), "MyIngress.fwd", (), priority=9)),
                   lambda: t.modify(TableEntry((("ternary", 1, 0xFF),), "MyIngress.fwd", (7,), priority=2)),
                   lambda: t.delete((("ternary", 1, 0xFF),), 2)):
        with pytest.raises(StateError) as e:
            change()
        assert e.value.code == "PERMISSION_DENIED"
    assert t.lookup((1,)).args == (1,)


def test_delete_then_lookup_misses_in_every_mode():
    for kind, match in [("exact", ("exact", 4)), ("lpm", ("lpm", 4, 8)), ("ternary", ("ternary", 4, 0xFF))]:
        t = table(("hdr.a", 8, kind))
        prio = 1 if kind == "ternary" else 0
        t.insert(TableEntry((match,), "MyIngress.fwd", (), priority=prio))
        t.delete((match,), prio)
        assert t.lookup((4,)) is None


def test_registers_wrap_to_width_and_check_index():
    info = ProgramInfo("x.p4", registers={"r": RegisterInfo("r", 8, 4)})
    regs = SwitchState(info).registers["r"]
    regs.write(3, 0x1FF)
    assert regs.read(3) == 0xFF
    with pytest.raises(StateError) as e:
        regs.read(4)
    assert e.value.code == "OUT_OF_RANGE"


def test_meter_turns_yellow_then_red_past_its_bursts():
    m = Meter()
    assert m.execute(1) == GREEN
    m.set_config(cir=0, cburst=1, pir=0, pburst=2)
    assert [m.execute(1) for _ in range(3)] == [GREEN, YELLOW, RED]


def test_const_default_action_keeps_its_arguments():
    """BMv2's MatchTable::set_default_action refuses any change of a const default entry."""
    t = table(("hdr.a", 8, "exact"), default_action="MyIngress.fwd", default_args=(3,),
              const_default_action=True)
    t.set_default("MyIngress.fwd", (3,))
    with pytest.raises(StateError) as e:
        t.set_default("MyIngress.fwd", (4,))
    assert e.value.code == "PERMISSION_DENIED"
    assert (t.default_action, t.default_args) == ("MyIngress.fwd", (3,))
