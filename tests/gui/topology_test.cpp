// The Topology view's model: what is drawn of the simulator's cluster graph for preset clusters
// (counts derived from the cluster files by hand), how link utilisation from a simulation lands on
// the drawn links, the colour scale, and the view fed by the main window.
#include <gtest/gtest.h>

#include <QSignalSpy>
#include <algorithm>
#include <map>
#include <set>

#include "gui/models/plan_inputs.h"
#include "gui/models/topology_graph.h"
#include "gui/views/main_window.h"
#include "gui/views/topology_view.h"
#include "gui/views/topology_widget.h"
#include "sim/spec/hardware.h"

namespace foresight::gui {
namespace {

ClusterSpec sized(const std::string& preset, int accelerators) {
  auto c = load_cluster(preset);
  EXPECT_TRUE(c.ok()) << c.error().message();
  if (accelerators > 0) {
    EXPECT_TRUE(resize_cluster(*c, accelerators, "test").ok());
  }
  return *c;
}

const DrawnLink* find_link(const TopologyDrawing& d, const std::string& x, const std::string& y) {
  for (const DrawnLink& l : d.links) {
    const std::string& a = d.vertices[l.a].name;
    const std::string& b = d.vertices[l.b].name;
    if ((a == x && b == y) || (a == y && b == x)) return &l;
  }
  return nullptr;
}

// Every vertex inside the picture, and no two in one row at the same place.
void expect_layout_ok(const TopologyDrawing& d) {
  std::map<int, std::vector<double>> xs;
  for (const DrawnVertex& v : d.vertices) {
    EXPECT_GE(v.row, 0) << v.name;
    EXPECT_LT(v.row, d.rows) << v.name;
    EXPECT_GT(v.x, 0) << v.name;
    EXPECT_LT(v.x, 1) << v.name;
    xs[v.row].push_back(v.x);
  }
  for (auto& [row, x] : xs) {
    std::sort(x.begin(), x.end());
    EXPECT_EQ(std::adjacent_find(x.begin(), x.end()), x.end()) << "row " << row;
  }
}

// dgx-h100-ndr sized to 16 GPUs: 2 DGX H100 nodes (8 GPUs, 8 NICs each); the leaf tier spans
// both nodes (one leaf group) and is rail-optimised, as the preset's cluster is cabled: a leaf
// per rail (8), NIC k of each node on leaf k; the spine has one switch per rail (8), each joined
// to its rail's leaf. Directed links: per node 8 GPU<->NVSwitch pairs and 8 GPU<->NIC pairs
// (32), 16 NIC<->leaf pairs (32), 8 leaf<->spine pairs (16): 2*32 + 32 + 16 = 112.
TEST(TopologyDrawing, SmallClusterIsDrawnWhole) {
  auto d = draw_topology(sized("dgx-h100-ndr", 16));
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->nodes, 2);
  EXPECT_EQ(d->total_devices, 16);
  EXPECT_EQ(d->total_node_switches, 2);
  EXPECT_EQ(d->total_nics, 16);
  EXPECT_EQ(d->switches_per_tier, (std::vector<int>{8, 8}));
  EXPECT_EQ(d->tier_names, (std::vector<std::string>{"leaf", "spine"}));
  EXPECT_EQ(d->total_links, 112);
  // Everything drawn; each cable (two directed links) is one line.
  EXPECT_EQ(d->drawn_nodes(), 2);
  EXPECT_EQ(d->hidden_nodes, 0);
  EXPECT_LT(d->more_x, 0);
  EXPECT_EQ(d->count(VertexKind::kDevice), 16);
  EXPECT_EQ(d->count(VertexKind::kNic), 16);
  EXPECT_EQ(d->count(VertexKind::kNodeSwitch), 2);
  EXPECT_EQ(d->count(VertexKind::kSwitch), 16);
  EXPECT_EQ(d->links.size(), 56u);
  EXPECT_EQ(d->hidden_switches_per_tier, (std::vector<int>{0, 0}));
  // Rows: spine, leaf, NICs, GPUs, NVSwitch.
  EXPECT_EQ(d->rows, 5);
  const std::map<std::string, int> rows = {{"tier1/group0/rail3", 0},
                                           {"tier0/group0/rail7", 1},
                                           {"node1/nic7", d->nic_row},
                                           {"rank9", d->device_row},
                                           {"node0/switch", d->node_switch_row}};
  int checked = 0;
  for (const DrawnVertex& v : d->vertices) {
    if (!rows.count(v.name)) continue;
    EXPECT_EQ(v.row, rows.at(v.name)) << v.name;
    ++checked;
  }
  EXPECT_EQ(checked, 5);
  const DrawnLink* nvlink = find_link(*d, "rank9", "node1/switch");
  ASSERT_NE(nvlink, nullptr);
  EXPECT_FALSE(nvlink->reported());
  EXPECT_NE(find_link(*d, "node1/nic7", "tier0/group0/rail7"), nullptr);
  EXPECT_EQ(find_link(*d, "node1/nic7", "tier0/group0/rail6"), nullptr);  // a NIC is on its rail's leaf
  EXPECT_NE(find_link(*d, "tier0/group0/rail3", "tier1/group0/rail3"), nullptr);
  EXPECT_EQ(find_link(*d, "tier0/group0/rail3", "tier1/group0/rail4"), nullptr);
  EXPECT_EQ(find_link(*d, "rank9", "node0/switch"), nullptr);  // GPUs reach only their own node's switch
  expect_layout_ok(*d);
  EXPECT_EQ(describe(*d),
            "dgx-h100-ndr, 2 nodes x 8 h100-sxm5-80gb: 2 node switches, 16 NICs, 16 network switches "
            "(leaf 8, spine 8), 112 directed links; 2 of 2 nodes drawn")
      << describe(*d);
}

// The preset's own 128 nodes: 4 leaf groups of 32 nodes, each with a leaf per rail (32 leaves),
// 8 spine rails. Six nodes are drawn (0..5, all in group 0), so the 8 leaves of group 0 and all 8
// spine rails above them; the other 122 nodes are one "more" box. Directed links: 128*32 +
// 1024*2 + 32 leaves * 1 rail * 2 = 6208.
TEST(TopologyDrawing, LargeClusterDrawsABoundedPart) {
  auto d = draw_topology(sized("dgx-h100-ndr", 0));
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->nodes, 128);
  EXPECT_EQ(d->total_devices, 1024);
  EXPECT_EQ(d->switches_per_tier, (std::vector<int>{32, 8}));
  EXPECT_EQ(d->total_links, 6208);
  ASSERT_EQ(d->drawn_nodes(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(d->node_slots[i].node, i);
  EXPECT_EQ(d->hidden_nodes, 122);
  EXPECT_GT(d->more_x, d->node_slots.back().x1);
  EXPECT_EQ(d->hidden_switches_per_tier, (std::vector<int>{24, 0}));
  EXPECT_EQ(d->vertices.size(), 6u * (8 + 8 + 1) + 8 + 8);
  EXPECT_EQ(d->links.size(), 6u * 16 + 6 * 8 + 8);
  for (const DrawnVertex& v : d->vertices) EXPECT_TRUE(v.node < 6) << v.name;
  expect_layout_ok(*d);

  // A busy link on node 125 brings that node into the picture, still six nodes in all.
  const std::vector<LinkUse> busy = {{"rank1000->node125/switch", "nvlink4", 1e9, 0.5}};
  auto focused = draw_topology(sized("dgx-h100-ndr", 0), busy);
  ASSERT_TRUE(focused.ok()) << focused.error().message();
  ASSERT_EQ(focused->drawn_nodes(), 6);
  EXPECT_EQ(focused->node_slots.back().node, 125);
  EXPECT_EQ(focused->hidden_nodes, 122);
  const DrawnLink* l = find_link(*focused, "rank1000", "node125/switch");
  ASSERT_NE(l, nullptr);
  EXPECT_DOUBLE_EQ(l->utilisation, 0.5);
  // Node 125 sits in group 3: two groups' leaves drawn now.
  EXPECT_EQ(focused->hidden_switches_per_tier, (std::vector<int>{16, 0}));

  // Fewer nodes when asked.
  auto two = draw_topology(sized("dgx-h100-ndr", 0), {}, DrawLimits{2, 16});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->drawn_nodes(), 2);
  EXPECT_EQ(two->hidden_nodes, 126);
}

// torus-3d: 64 nodes on a 4x4x4 torus, one router per node, node n at x = n % 4, y = n / 4 % 4.
// Drawn nodes 0..5: the x-ring 0-1-2-3-0 (4 cables), 4-5, and the y-neighbours 0-4, 1-5: 7.
TEST(TopologyDrawing, TorusRoutersStayWithTheirNodes) {
  auto d = draw_topology(sized("torus-3d", 0));
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_TRUE(d->torus);
  EXPECT_EQ(d->switches_per_tier, (std::vector<int>{64}));
  EXPECT_EQ(d->drawn_nodes(), 6);
  int router_links = 0;
  for (const DrawnLink& l : d->links)
    if (d->vertices[l.a].kind == VertexKind::kSwitch && d->vertices[l.b].kind == VertexKind::kSwitch)
      ++router_links;
  EXPECT_EQ(router_links, 7);
  EXPECT_NE(find_link(*d, "node3/torus-router", "node0/torus-router"), nullptr);  // wrap-around
  EXPECT_EQ(d->hidden_switches_per_tier, (std::vector<int>{58}));
  for (const DrawnVertex& v : d->vertices) EXPECT_LT(v.node, 6) << v.name;
}

TEST(TopologyDrawing, UtilisationFromLinkNames) {
  // Both directions of one cable: the line shows the busier, and the bytes of both.
  const std::vector<LinkUse> busy = {{"rank3->node0/switch", "nvlink4", 2e9, 0.4},
                                     {"node0/switch->rank3", "nvlink4", 3e9, 0.7}};
  auto d = draw_topology(sized("dgx-h100-ndr", 16), busy);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->reported_links, 2);
  EXPECT_EQ(d->drawn_reported_links, 2);
  const DrawnLink* l = find_link(*d, "rank3", "node0/switch");
  ASSERT_NE(l, nullptr);
  EXPECT_DOUBLE_EQ(l->utilisation, 0.7);
  EXPECT_DOUBLE_EQ(l->bytes, 5e9);
  int reported = 0;
  for (const DrawnLink& x : d->links) reported += x.reported();
  EXPECT_EQ(reported, 1);

  // A link that is not in this cluster's graph (simulated on a bigger one) says so.
  auto bad = draw_topology(sized("dgx-h100-ndr", 16), {{"rank99->node12/switch", "nvlink4", 1, 0.1}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(
      bad.error().message(),
      "link \"rank99->node12/switch\": not a link of cluster dgx-h100-ndr (2 nodes); was it simulated on "
      "another cluster?");
}

// The example plan simulated: every link the simulator reports is drawn (2 nodes: all of them),
// with that utilisation or, where both directions are reported, the larger.
TEST(TopologyDrawing, ColouredFromASimulation) {
  auto report = simulate_link_use(example_inputs());
  ASSERT_TRUE(report.ok()) << report.error().message();
  ASSERT_FALSE(report->busiest.empty());
  EXPECT_GT(report->step_s, 0);
  auto d = draw_topology(report->cluster, report->busiest);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->reported_links, static_cast<int>(report->busiest.size()));
  EXPECT_EQ(d->drawn_reported_links, d->reported_links);
  // Unordered pair of vertex names -> the larger utilisation of its two directions.
  auto pair_of = [](const std::string& x, const std::string& y) {
    return x < y ? std::pair(x, y) : std::pair(y, x);
  };
  std::map<std::pair<std::string, std::string>, double> expected;
  for (const LinkUse& u : report->busiest) {
    const auto arrow = u.name.find("->");
    ASSERT_NE(arrow, std::string::npos) << u.name;
    const auto key = pair_of(u.name.substr(0, arrow), u.name.substr(arrow + 2));
    expected[key] = std::max(expected[key], u.utilisation);
  }
  int reported = 0;
  for (const DrawnLink& l : d->links) {
    if (!l.reported()) continue;
    ++reported;
    const auto key = pair_of(d->vertices[l.a].name, d->vertices[l.b].name);
    ASSERT_TRUE(expected.count(key)) << key.first << " " << key.second;
    EXPECT_DOUBLE_EQ(l.utilisation, expected[key]);
    EXPECT_NE(utilisation_colour(l.utilisation), utilisation_colour(-1));
  }
  EXPECT_EQ(reported, static_cast<int>(expected.size()));
}

TEST(TopologyDrawing, ColourScale) {
  EXPECT_EQ(utilisation_colour(0).hue(), 120);   // green
  EXPECT_EQ(utilisation_colour(0.5).hue(), 60);  // yellow
  EXPECT_EQ(utilisation_colour(1).hue(), 0);     // red
  EXPECT_EQ(utilisation_colour(3), utilisation_colour(1));
  EXPECT_EQ(utilisation_colour(-1).saturation(), 0);  // grey: not reported
  EXPECT_LT(utilisation_colour(0.8).hue(), utilisation_colour(0.2).hue());
}

// The view in the window: the Setup's plan is drawn on a worker thread; simulating colours it.
TEST(TopologyView, DrawsTheSetupsClusterAndItsSimulation) {
  MainWindow w;
  QSignalSpy drawn(w.topology(), &TopologyView::drawn);
  w.set_inputs(example_inputs());
  ASSERT_TRUE(drawn.wait(10000));
  ASSERT_TRUE(w.topology()->picture()->has_drawing());
  EXPECT_EQ(w.topology()->picture()->drawing().nodes, 8);
  EXPECT_EQ(w.topology()->picture()->drawing().reported_links, 0);
  QSignalSpy simulated(w.topology(), &TopologyView::simulated);
  w.topology()->simulate();
  ASSERT_TRUE(simulated.wait(20000));
  ASSERT_TRUE(drawn.wait(10000));
  EXPECT_GT(w.topology()->picture()->drawing().reported_links, 0);
  EXPECT_TRUE(w.topology()->status_text().startsWith(QStringLiteral("Coloured")))
      << w.topology()->status_text().toStdString();
  // Hit testing: the middle of a drawn link finds it.
  const TopologyWidget* pic = w.topology()->picture();
  const_cast<TopologyWidget*>(pic)->resize(900, 520);
  const DrawnLink& l = pic->drawing().links.front();
  const QPointF mid = (pic->vertex_position(l.a) + pic->vertex_position(l.b)) / 2;
  EXPECT_TRUE(pic->link_at_position(mid).has_value());

  // Another plan on the same cluster: its links are grey until it is simulated; back to the
  // simulated plan, its utilisation returns.
  PlanInputs other = example_inputs();
  other.plan.zero_stage = 2;
  w.set_inputs(other);
  ASSERT_TRUE(drawn.wait(10000));
  EXPECT_EQ(w.topology()->picture()->drawing().nodes, 8);
  EXPECT_EQ(w.topology()->picture()->drawing().reported_links, 0);
  w.set_inputs(example_inputs());
  ASSERT_TRUE(drawn.wait(10000));
  EXPECT_GT(w.topology()->picture()->drawing().reported_links, 0);

  // An invalid plan clears the picture and says why.
  PlanInputs bad = example_inputs();
  bad.plan.tp = 3;
  w.set_inputs(bad);
  EXPECT_FALSE(w.topology()->picture()->has_drawing());
  EXPECT_TRUE(w.topology()->status_text().contains(QStringLiteral("/tp")));
}

// The colour scale ends at the busiest link (rounded up to 10%), so busy links are drawn hot even
// far from saturation; the busiest come first for their figures.
TEST(Topology, ColourScaleEndsAtTheBusiestLink) {
  TopologyDrawing d;
  EXPECT_DOUBLE_EQ(utilisation_scale(d), 1.0);
  for (double u : {-1.0, 0.05, 0.186, 0.12, -1.0}) {
    DrawnLink l;
    l.utilisation = u;
    d.links.push_back(l);
  }
  EXPECT_NEAR(utilisation_scale(d), 0.2, 1e-12);
  EXPECT_EQ(link_colour(d, d.links[2]), utilisation_colour(0.186 / 0.2));
  EXPECT_EQ(link_colour(d, d.links[0]), utilisation_colour(-1));
  EXPECT_EQ(busiest_drawn_links(d, 2), (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(busiest_drawn_links(d, 10).size(), 3u);
  d.links[1].utilisation = 0.004;
  d.links[2].utilisation = 0.01;
  d.links[3].utilisation = 0.0;
  EXPECT_NEAR(utilisation_scale(d), 0.1, 1e-12);  // at least 10%
  d.links[3].utilisation = 1.7;                   // more than saturated: the scale stops at 100%
  EXPECT_NEAR(utilisation_scale(d), 1.0, 1e-12);
}

}  // namespace
}  // namespace foresight::gui
