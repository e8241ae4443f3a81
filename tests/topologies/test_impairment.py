"""Link impairment rulesets (loss both ways, duplication and reordering host -> switch) as nft reads them."""
import pytest

from topologies.fabric import FabricError, Impairment


def test_loss_and_duplicates_become_netdev_rules_on_the_interface():
    assert Impairment(loss_pct=5, duplicate_pct=1.5).nft_ruleset("h1-eth0") == "\n".join([
        "table netdev p4inc_impair {",
        "  chain egress {",
        '    type filter hook egress device "h1-eth0" priority 0;',
        "    numgen random mod 10000 < 500 counter drop",
        '    numgen random mod 10000 < 150 counter dup to "h1-eth0"',
        "  }",
        "  chain ingress {",
        '    type filter hook ingress device "h1-eth0" priority 0;',
        "    numgen random mod 10000 < 500 counter drop",
        "  }",
        "}", ""])


def test_loss_between_switches_is_a_root_namespace_table_per_switch_port_dropping_on_departure():
    """On egress: the switch's packet socket sees an arriving frame before any ingress hook."""
    assert Impairment(switch_loss_pct=2.5).switch_link_ruleset("s1-eth3") == "\n".join([
        "table netdev p4inc_impair_s1_eth3 {",
        "  chain egress {",
        '    type filter hook egress device "s1-eth3" priority 0;',
        "    numgen random mod 10000 < 250 counter drop",
        "  }",
        "}", ""])
    with pytest.raises(FabricError, match="switch link loss must be a percentage"):
        Impairment(switch_loss_pct=100)


def test_reordering_marks_packets_for_the_slow_lane():
    assert "    numgen random mod 10000 < 1000 counter meta priority set 1:20" in (
        Impairment(reorder_pct=10).nft_ruleset("h3-eth0").splitlines())


def test_no_impairment_gives_chains_without_rules():
    assert "numgen" not in Impairment().nft_ruleset("h2-eth0")


@pytest.mark.parametrize("loss, dup, reorder", [(-1, 0, 0), (100, 0, 0), (0, 150, 0), (0, 0, -5)])
def test_percentages_outside_0_to_100_are_refused(loss, dup, reorder):
    with pytest.raises(FabricError, match="percentage"):
        Impairment(loss, dup, reorder)
