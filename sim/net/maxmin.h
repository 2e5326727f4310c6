// Max-min fair bandwidth sharing: actions (flows, or bundles of flows) use resources (links) with
// weights, and get rates by progressive filling -- SimGrid's LMM solver in its simplest form.
//
// Each action has a rate r; on each resource l it consumes w(a,l) * r. Progressive filling raises
// all unfixed rates together; the first resource to saturate fixes the rates of its actions at
//   share(l) = remaining_capacity(l) / sum of weights of unfixed actions on l
// and the process repeats on what is left. Examples (unit tests check them):
//   one flow alone on a link of capacity C            -> r = C
//   two flows on one link                             -> r = C/2 each
//   flow A on links 1 and 2, flow B on link 2 only    -> both C2/2 if C2/2 < C1
//
// Only the component of the sharing graph touched since the last solve is recomputed.
//
//   MaxMinSystem s;
//   int link = s.add_resource(25e9);
//   int a = s.add_action({{link, 1.0}});
//   s.solve();  s.rate(a) == 25e9
#pragma once

#include <limits>
#include <vector>

namespace foresight {

struct Usage {
  int resource = 0;
  double weight = 1.0;
};

class MaxMinSystem {
 public:
  int add_resource(double capacity);
  double capacity(int resource) const { return resources_[resource].capacity; }
  int resources() const { return static_cast<int>(resources_.size()); }

  // Adds an active action; `bound` caps its rate. Returns its id (ids of removed actions are reused,
  // with their usage lists' storage: no allocation per action in a long simulation).
  int add_action(const std::vector<Usage>& usages, double bound = std::numeric_limits<double>::infinity());
  void remove_action(int id);
  double rate(int id) const { return actions_[id].rate; }
  const std::vector<Usage>& usages(int id) const { return actions_[id].usages; }

  // Recomputes the rates of every action whose component changed since the last solve, and
  // appends the ids whose rate changed to `changed` (if given).
  void solve(std::vector<int>* changed = nullptr);

  // Current load of a resource (sum of weight * rate of its actions), for utilisation reports.
  double load(int resource) const;

 private:
  struct Resource {
    double capacity = 0;
    std::vector<int> actions;  // active actions using it
    bool dirty = false;
    int mark = 0;  // component search stamp
  };
  struct Action {
    std::vector<Usage> usages;
    double rate = 0;
    double bound = 0;
    bool active = false;
    bool fixed = false;
    int mark = 0;
  };
  // solve()'s steps: the component of the dirty resources into comp_actions_ and comp_resources_;
  // the rate of an action alone in it; one level of progressive filling (the actions it fixes).
  void collect_component();
  void solve_alone(std::vector<int>* changed);
  std::size_t fill_level();

  std::vector<Resource> resources_;
  std::vector<Action> actions_;
  std::vector<int> free_ids_;
  std::vector<int> dirty_;
  int stamp_ = 0;
  // Scratch space reused across solves.
  std::vector<int> comp_actions_, comp_resources_, stack_;
  std::vector<double> remaining_, weight_sum_, share_, old_rates_;  // share_: remaining / weight sum
};

}  // namespace foresight
