"""The topology JSON: what star and leaf-spine write, that it reads back, and the errors
bad descriptions get. No root needed.
"""
import json

import pytest

from topologies.spec import Endpoint, JobSpec, Topology, TopologyError, leaf_spine, star, three_tier

CONTRACT_EXAMPLE = {
    "hosts": {"h1": {"ip": "10.0.0.1/24", "mac": "08:00:00:00:00:01", "commands": []},
              "h2": {"ip": "10.0.0.2/24", "mac": "08:00:00:00:00:02", "commands": []}},
    "switches": {"s1": {"device_id": 0, "grpc_addr": "127.0.0.1:50051", "thrift_port": 9090, "cpu_port": 510},
                 "s2": {"device_id": 1, "grpc_addr": "127.0.0.1:50052", "thrift_port": 9091, "cpu_port": 510}},
    "links": [["h1", "s1-p1"], ["h2", "s2-p1"], ["s1-p3", "s2-p2", "1ms", 100]],
    "jobs": [{"job_id": 1, "workers": ["h1", "h2"]}],
    "mtu": 1500,
}


def test_star_of_two_is_exactly_the_documented_json():
    assert star(2).to_dict() == {
        "hosts": {"h1": {"ip": "10.0.0.1/24", "mac": "08:00:00:00:00:01", "commands": []},
                  "h2": {"ip": "10.0.0.2/24", "mac": "08:00:00:00:00:02", "commands": []}},
        "switches": {"s1": {"device_id": 0, "grpc_addr": "127.0.0.1:50051", "thrift_port": 9090,
                            "cpu_port": 510}},
        "links": [["h1", "s1-p1"], ["h2", "s1-p2"]],
        "jobs": [{"job_id": 1, "workers": ["h1", "h2"]}],
        "mtu": 1500,
    }


def test_mtu_and_a_jobs_elements_per_packet_round_trip_through_json():
    topo = star(2, mtu=9000)
    topo = Topology(topo.hosts, topo.switches, topo.links, [JobSpec(1, ("h1", "h2"), elements_per_packet=512)], mtu=9000)
    data = topo.to_dict()
    assert data["mtu"] == 9000 and data["jobs"] == [{"job_id": 1, "workers": ["h1", "h2"], "elements_per_packet": 512}]
    assert Topology.from_dict(data) == topo
    assert Topology.from_dict({k: v for k, v in data.items() if k != "mtu"}).mtu == 1500
    assert leaf_spine(2, 1, 2, mtu=9000).mtu == 9000


@pytest.mark.parametrize("change, message", [
    ({"mtu": 100}, "mtu 100 is outside 576..65535"),
    ({"mtu": 70000}, "mtu 70000 is outside"),
    ({"jobs": [{"job_id": 1, "workers": ["h1"], "elements_per_packet": 0}]}, "elements_per_packet must be at least 1"),
    ({"jobs": [{"job_id": 1, "workers": ["h1"], "elements_per_packet": "32"}]}, "elements_per_packet is a whole number"),
])
def test_bad_mtu_or_elements_per_packet_is_refused(change, message):
    with pytest.raises(TopologyError, match=message):
        Topology.from_dict(star(2).to_dict() | change)


@pytest.mark.parametrize("n", range(2, 9))
def test_star_puts_host_i_on_port_i_with_its_address(n):
    topo = star(n)
    for i in range(1, n + 1):
        h = topo.hosts[f"h{i}"]
        assert (h.ip, h.mac, h.intf) == (f"10.0.0.{i}/24", f"08:00:00:00:00:0{i}", f"h{i}-eth0")
        assert topo.host_port(f"h{i}") == ("s1", i)
    assert topo.jobs[0].workers == tuple(f"h{i}" for i in range(1, n + 1))
    assert topo.switch_intfs() == sorted(f"s1-eth{i}" for i in range(1, n + 1))


@pytest.mark.parametrize("n", [1, 9])
def test_star_outside_two_to_eight_hosts_is_refused(n):
    with pytest.raises(TopologyError, match="2 to 8 hosts"):
        star(n)


def test_star_takes_its_grpc_and_thrift_ports():
    s = star(3, grpc_port=50100, thrift_port=9300, device_id=4).switches["s1"]
    assert (s.grpc_addr, s.thrift_port, s.device_id) == ("127.0.0.1:50100", 9300, 4)


def test_contract_example_round_trips_through_a_file(tmp_path):
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(CONTRACT_EXAMPLE))
    topo = Topology.load(path)
    assert topo.links[2].delay == "1ms" and topo.links[2].bw == 100
    assert topo.host_port("h2") == ("s2", 1)
    topo.dump(tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text()) == CONTRACT_EXAMPLE


def test_a_running_fabrics_target_round_trips_and_a_plain_topology_has_none(tmp_path):
    """The fabric writes its target (p4sim, bmv2): the controller reaches registers by it."""
    plain, on_bmv2 = star(2), star(2)
    on_bmv2.target = "bmv2"
    on_bmv2.dump(tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["target"] == "bmv2"
    assert Topology.load(tmp_path / "t.json").target == "bmv2"
    assert "target" not in plain.to_dict() and Topology.from_dict(plain.to_dict()).target is None
    with pytest.raises(TopologyError, match="target must be a name, not 7"):
        Topology.from_dict({**plain.to_dict(), "target": 7})


def test_leaf_spine_wires_hosts_below_and_spines_above_each_leaf():
    topo = leaf_spine(leaves=2, spines=2, hosts_per_leaf=2)
    assert sorted(topo.switches) == ["s1", "s2", "s3", "s4"]
    assert [topo.host_port(h) for h in ("h1", "h2", "h3", "h4")] == [("s1", 1), ("s1", 2), ("s2", 1), ("s2", 2)]
    uplinks = {(str(link.a), str(link.b)) for link in topo.links if link.a.node in topo.switches}
    assert uplinks == {("s1-p3", "s3-p1"), ("s2-p3", "s3-p2"), ("s1-p4", "s4-p1"), ("s2-p4", "s4-p2")}
    assert topo.hosts["h3"].ip == "10.0.2.1/24"
    assert topo.hosts["h3"].commands == ("ip neigh replace 10.0.2.254 lladdr 08:00:00:00:02:00 dev h3-eth0",
                                         "ip route replace default via 10.0.2.254 dev h3-eth0")
    assert Topology.from_dict(topo.to_dict()) == topo
    assert topo.switch_link_intfs() == ["s1-eth3", "s1-eth4", "s2-eth3", "s2-eth4", "s3-eth1", "s3-eth2",
                                        "s4-eth1", "s4-eth2"]


def test_three_tier_wires_leaves_to_their_pods_aggregation_switch_and_those_to_the_core():
    topo = three_tier(pods=2, leaves_per_pod=2, hosts_per_leaf=1)
    assert sorted(topo.switches) == ["s1", "s2", "s3", "s4", "s5", "s6", "s7"]
    assert [topo.host_port(h) for h in ("h1", "h2", "h3", "h4")] == [("s1", 1), ("s2", 1), ("s3", 1), ("s4", 1)]
    uplinks = {(str(link.a), str(link.b)) for link in topo.links if link.a.node in topo.switches}
    assert uplinks == {("s1-p2", "s5-p1"), ("s2-p2", "s5-p2"), ("s5-p3", "s7-p1"),
                       ("s3-p2", "s6-p1"), ("s4-p2", "s6-p2"), ("s6-p3", "s7-p2")}
    assert topo.jobs[0].hierarchical and topo.hosts["h4"].ip == "10.0.4.1/24"
    assert Topology.from_dict(topo.to_dict()) == topo
    with pytest.raises(TopologyError, match="three-tier fabric needs"):
        three_tier(0, 2, 2)


def test_a_leaf_spine_job_is_hierarchical_unless_asked_flat_and_the_json_says_so():
    assert leaf_spine(2, 1, 2).to_dict()["jobs"] == [{"job_id": 1, "workers": ["h1", "h2", "h3", "h4"],
                                                      "hierarchical": True}]
    assert "hierarchical" not in leaf_spine(2, 1, 2, hierarchical=False).to_dict()["jobs"][0]
    data = leaf_spine(2, 1, 2).to_dict()
    data["jobs"][0]["hierarchical"] = "yes"
    with pytest.raises(TopologyError, match="hierarchical is true or false, not 'yes'"):
        Topology.from_dict(data)


def test_endpoint_text_is_a_host_or_a_switch_port():
    assert Endpoint.parse("h1") == Endpoint("h1")
    assert Endpoint.parse("s12-p3") == Endpoint("s12", 3)
    assert str(Endpoint("s1", 7)) == "s1-p7"
    with pytest.raises(TopologyError, match="neither a host"):
        Endpoint.parse("s1-p0")


def broken(**changes):
    data = json.loads(json.dumps(CONTRACT_EXAMPLE))
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = data
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if value is None:
            del node[key]
        elif isinstance(node, list):
            node[int(key)] = value
        else:
            node[key] = value
    return data


@pytest.mark.parametrize("changes, message", [
    ({"links__0": ["h1-p1", "s1-p1"]}, "a host has one interface"),
    ({"links__0": ["h1", "s1"]}, "needs a port"),
    ({"links__0": ["h9", "s1-p1"]}, "no host or switch named 'h9'"),
    ({"links__1": ["h2", "s1-p1"]}, "'s1-p1' is used twice"),
    ({"links__0": ["h1"]}, "is not \\[a, b\\]"),
    ({"jobs__0__workers": ["h1", "h7"]}, "workers \\['h7'\\] are not hosts"),
    ({"jobs__0__workers": ["h1", "h1"]}, "worker 'h1' is used twice"),
    ({"hosts__h1__ip": "10.0.0.300/24"}, "not an address"),
    ({"hosts__h1__ip": "10.0.0.1"}, "needs a prefix length"),
    ({"hosts__h1__mac": "08:00:00:00:01"}, "is not like"),
    ({"hosts__h1__mac": None}, "missing key 'mac'"),
    ({"switches__s2__device_id": 0}, "device_id 0 is used twice"),
    ({"switches__s1__grpc_addr": "localhost"}, "is not HOST:PORT"),
])
def test_bad_description_gets_an_error_that_names_the_problem(changes, message):
    with pytest.raises(TopologyError, match=message):
        Topology.from_dict(broken(**changes))


def test_unreadable_json_error_gives_line_and_column(tmp_path):
    path = tmp_path / "topo.json"
    path.write_text('{"hosts": {}\n  "links": []}')
    with pytest.raises(TopologyError, match=r"topo.json:2:3: not valid JSON"):
        Topology.load(path)


def test_missing_file_error_names_the_file(tmp_path):
    with pytest.raises(TopologyError, match="cannot read topology .*nope.json"):
        Topology.load(tmp_path / "nope.json")
