// The Topology view's picture, headless: which parts of the simulator's cluster graph
// (sim/net/topology.h, the graph the discrete-event simulator routes on) are drawn, where, and how
// busy each drawn link was in the last simulation (SimResult::busiest_links).
//
//   auto d = draw_topology(evaluation.cluster);            // the cluster sized to the plan
//   auto d = draw_topology(cluster, result.busiest_links); // ... with utilisation from a simulation
//   for (const DrawnLink& l : d->links) paint(l, utilisation_colour(l.utilisation));
//
// Large clusters stay readable: at most `max_nodes` nodes are drawn -- the nodes the busiest
// links touch first, then the lowest-numbered -- and the rest are counted in `hidden_nodes`;
// switches are drawn where they connect drawn nodes upward, the others counted per tier.
// Links are drawn undirected: the two directions of a cable are one line, coloured by the busier.
//
// Layout: `rows` horizontal bands, row 0 at the top: the network tiers (highest first), then the
// NICs, the accelerators and each node's switch (NVSwitch-class fabric). x is in [0, 1].
#pragma once

#include <QColor>
#include <string>
#include <vector>

#include "gui/models/plan_inputs.h"
#include "sim/core/status.h"
#include "sim/des/simulator.h"
#include "sim/net/topology.h"
#include "sim/spec/hardware.h"

namespace foresight::gui {

struct DrawnVertex {
  VertexKind kind = VertexKind::kDevice;
  int node = -1;      // devices, node switches, NICs, torus routers
  int tier = -1;      // network switches
  std::string name;   // the simulator's name: "rank3", "node0/switch", "tier1/group0/rail2"
  std::string label;  // short, for the picture: "3", "nic0", "nvlink4", "g0 r2"
  int row = 0;
  double x = 0.5;
};

struct DrawnLink {
  int a = 0, b = 0;         // indices into TopologyDrawing::vertices; `a` is the lower end
  std::string kind;         // nvlink4, pcie5, infiniband, ...
  double bandwidth = 0;     // bytes/s per direction (after the link's efficiency)
  double utilisation = -1;  // the busier direction in the last simulation; < 0: not reported
  double bytes = 0;         // both directions, in the step
  bool reported() const { return utilisation >= 0; }
};

// One drawn node's horizontal extent, for its frame and label.
struct NodeSlot {
  int node = 0;
  double x0 = 0, x1 = 1;
  int hidden_devices = 0;  // accelerators of this node not drawn (more than max_devices)
};

struct DrawLimits {
  int max_nodes = 6;
  int max_devices = 16;  // per node; NICs likewise
};

struct TopologyDrawing {
  std::string cluster;
  int nodes = 0, devices_per_node = 0, nics_per_node = 0;
  std::string accelerator;  // "H100-SXM5-80GB"
  // The whole graph as the simulator builds it; links are directed, as the simulator counts them.
  int total_devices = 0, total_node_switches = 0, total_nics = 0, total_switches = 0, total_links = 0;
  std::vector<std::string> tier_names;  // lowest first ("leaf", "spine"), as in the ClusterSpec
  std::vector<int> switches_per_tier;   // lowest first
  bool torus = false;

  // What is drawn.
  std::vector<NodeSlot> node_slots;  // ascending node number
  int hidden_nodes = 0;
  double more_x = -1;  // where "N more nodes" goes; < 0: nothing hidden
  std::vector<int> hidden_switches_per_tier;
  std::vector<DrawnVertex> vertices;
  std::vector<DrawnLink> links;
  int rows = 0;
  int nic_row = -1, device_row = 0, node_switch_row = 0;

  // Utilisation: links the simulation reported, and how many of them are drawn.
  int reported_links = 0, drawn_reported_links = 0;
  double step_s = 0;  // the simulated step the utilisation refers to

  int drawn_nodes() const { return static_cast<int>(node_slots.size()); }
  int count(VertexKind k) const;
};

// Builds the simulator's Topology of `cluster` (already sized, e.g. Evaluation::cluster) and
// picks what to draw. `busiest`: SimResult::busiest_links of a simulation on this cluster; a link
// name that is not in the graph is an error naming it.
Result<TopologyDrawing> draw_topology(const ClusterSpec& cluster, const std::vector<LinkUse>& busiest = {},
                                      DrawLimits limits = {});

// One line for the view's header: "dgx-h100-ndr, 2 nodes x 8 h100-sxm5-80gb: 2 node switches,
// 16 NICs, 9 network switches (leaf 1, spine 8), 100 directed links; 2 of 2 nodes drawn".
std::string describe(const TopologyDrawing& d);

// Green (idle) through yellow (half) to red (saturated); grey when not reported.
QColor utilisation_colour(double utilisation);

// The top of the colour scale: the busiest reported link's utilisation rounded up to the next
// 10% (at least 10%, at most 100%), so that the busiest links are drawn in the scale's hot end
// even when no link is near saturation (1 when nothing is reported).
double utilisation_scale(const TopologyDrawing& d);
// A link's colour on that scale (grey when not reported).
QColor link_colour(const TopologyDrawing& d, const DrawnLink& l);
// The reported links by utilisation, busiest first, at most `n` (indices into d.links): those the
// view labels with their figure.
std::vector<std::size_t> busiest_drawn_links(const TopologyDrawing& d, std::size_t n);

// The network part of a simulation of `in`: its busiest links and step time (no trace written).
struct LinkReport {
  PlanInputs inputs;    // what was simulated: utilisation belongs to this plan only
  ClusterSpec cluster;  // sized to the plan
  std::vector<LinkUse> busiest;
  double step_s = 0;
};
Result<LinkReport> simulate_link_use(const PlanInputs& in);

}  // namespace foresight::gui
