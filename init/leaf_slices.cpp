// Where a JAX model tree's layers are (init/describe.hpp, leaf_slices): the stacked axes of each leaf
// and the canonical name of each slice, decided here for every JAX framework the adapter reads; and
// what the adapter's rules give those leaves and slices (apply_rules).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/describe.hpp>

namespace layerinit {
namespace {

using Path = std::vector<std::string>;

// The messages are the adapter's since it first made them: shapes as Python tuples, "(8,)".
std::string py_tuple(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// `parts` joined by `seps` ("." where none is given), with the texts `at[p]` (stacked axes' indices)
// between parts[p - 1] and parts[p], each a component of its own: "blocks.3.attn.wq.weight",
// "__layer_stack_no_per_layer.3.block/linear.w".
std::string joined(const Path& parts, const Path& seps, const std::map<std::size_t, Path>& at = {}) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (const auto it = at.find(i); it != at.end()) {
      if (i) out += '.';
      for (const auto& text : it->second) out += text + '.';
    } else if (i) {
      out += i - 1 < seps.size() ? seps[i - 1] : ".";
    }
    out += parts[i];
  }
  return out;
}

std::string name_of(const FrameworkLeaf& lf) { return joined(lf.parts, lf.seps); }

// A leaf the tree does not allow, in the adapter's words: the line is the problem.
[[noreturn]] void refused(const std::string& line) { throw bad_input("tree", "", line, line); }

Path prefix(const Path& parts, std::size_t n) { return Path(parts.begin(), parts.begin() + std::min(n, parts.size())); }

bool starts_with(const Path& parts, const Path& node) {
  return parts.size() >= node.size() && std::equal(node.begin(), node.end(), parts.begin());
}
bool lies_under(const FrameworkLeaf& lf, const Path& node) { return lf.parts.size() > node.size() && starts_with(lf.parts, node); }

// hk.layer_stack's module when it is given no name (haiku/_src/layer_stack.py): __layer_stack_no_per_layer,
// __layer_stack_with_per_layer, with Haiku's instance suffix _N.
bool haiku_stack(std::string_view part) {
  for (std::string_view head : {"__layer_stack_no_per_layer", "__layer_stack_with_per_layer"}) {
    if (!part.starts_with(head)) continue;
    part.remove_prefix(head.size());
    return part.empty() || (part.size() > 1 && part[0] == '_' &&
                            part.find_first_not_of("0123456789", 1) == std::string_view::npos);
  }
  return false;
}

Path split_prefix(std::string_view p, Naming naming) {
  const char* at = naming == Naming::haiku ? "./" : ".";
  Path out;
  for (std::size_t start = 0;;) {
    const std::size_t end = p.find_first_of(at, start);
    out.emplace_back(p.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

std::string some(const std::vector<FrameworkLeaf>& leaves) {
  std::vector<std::string> names;
  for (const FrameworkLeaf& lf : leaves) names.push_back(name_of(lf));
  return listed(names, 8);
}

void given_prefixes(const std::vector<FrameworkLeaf>& leaves, const std::vector<std::string>& prefixes, Naming naming,
                    std::vector<LeafSlices>& out) {
  for (const auto& p : prefixes) {
    const Path pp = split_prefix(p, naming);
    bool any = false;
    for (std::size_t i = 0; i < leaves.size(); ++i)
      if (lies_under(leaves[i], pp)) out[i].lead.emplace_back(pp.size(), 0), any = true;
    if (!any) bad_argument("stacked", ": no leaf lies under '" + p + "' (leaves: " + some(leaves) + ")");
  }
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    auto& lead = out[i].lead;
    std::sort(lead.begin(), lead.end());
    for (std::size_t a = 0; a < lead.size(); ++a) {
      const FrameworkLeaf& lf = leaves[i];
      if (lf.shape.size() <= a)
        refused("leaf '" + name_of(lf) + "' of shape " + py_tuple(lf.shape) + " has no stacked axis " +
                std::to_string(a) + " for '" + joined(prefix(lf.parts, lead[a].first), {}) + "'");
      lead[a].second = lf.shape[a];
    }
  }
  for (const auto& p : prefixes) {  // one size per prefix: its slices are one list of layers
    const Path pp = split_prefix(p, naming);
    std::set<std::uint64_t> sizes;
    for (std::size_t i = 0; i < leaves.size(); ++i)
      for (const auto& [q, size] : out[i].lead)
        if (q == pp.size() && starts_with(leaves[i].parts, pp)) sizes.insert(size);
    if (sizes.size() > 1) {
      std::string list;
      for (std::uint64_t s : sizes) list += (list.empty() ? "" : ", ") + std::to_string(s);
      bad_argument("stacked", ": the leaves under '" + p + "' have leading axes of sizes [" + list +
                   "], not one number of layers");
    }
  }
}

// Stacked axes where the model's transforms put them: a transform's leaves at their deepest common
// node (the module the transform made, so that slice l of blocks.w1 is blocks.{l}.w1, the name of its
// per-layer twin), in a Haiku tree at the hk.layer_stack module above them. A constant under that node
// with the axis's size at the same dimension is one of its slices too (a constant says nothing of
// layers, and its value does not depend on the name).
void recorded_axes(const std::vector<FrameworkLeaf>& leaves, Naming naming, std::vector<LeafSlices>& out) {
  struct Member {
    std::size_t leaf, dim;
    std::uint64_t size;
  };
  std::vector<std::pair<std::uint64_t, std::vector<Member>>> groups;  // in the order first seen
  for (std::size_t i = 0; i < leaves.size(); ++i)
    for (const auto& ax : leaves[i].recorded) {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == ax.group; });
      if (it == groups.end()) it = groups.insert(groups.end(), {ax.group, {}});
      it->second.push_back({i, ax.dim, ax.size});
    }
  struct Stack {
    Path node;
    std::optional<std::size_t> dim;  // none: its leaves hold it at different dimensions
    std::uint64_t size;
    std::set<std::size_t> members;
  };
  std::vector<Stack> stacks;
  for (const auto& [group, members] : groups) {
    Path node = prefix(leaves[members[0].leaf].parts, leaves[members[0].leaf].parts.size() - 1);
    for (const Member& m : members) {
      const Path& parts = leaves[m.leaf].parts;
      std::size_t n = 0;
      while (n < node.size() && n + 1 < parts.size() && node[n] == parts[n]) ++n;
      node.resize(n);
    }
    if (naming == Naming::haiku)
      for (std::size_t p = node.size(); p > 0; --p)
        if (haiku_stack(node[p - 1])) {
          node.resize(p);
          break;
        }
    Stack s{node, members[0].dim, members[0].size, {}};
    for (const Member& m : members) {
      out[m.leaf].lead.emplace_back(node.size(), m.size);
      out[m.leaf].dims.push_back(m.dim);
      s.members.insert(m.leaf);
      if (m.dim != members[0].dim) s.dim.reset();
    }
    stacks.push_back(std::move(s));
  }
  for (const Stack& s : stacks) {
    if (!s.dim) continue;
    const std::size_t d = *s.dim;
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      const FrameworkLeaf& lf = leaves[i];
      auto& dims = out[i].dims;
      if (!s.members.count(i) && lf.recorded_constant && lies_under(lf, s.node) && lf.shape.size() > d &&
          lf.shape[d] == s.size && std::find(dims.begin(), dims.end(), d) == dims.end()) {
        out[i].lead.emplace_back(s.node.size(), s.size);
        dims.push_back(d);
      }
    }
  }
  for (LeafSlices& o : out) {  // outer stacks first
    std::vector<std::size_t> order(o.lead.size());
    for (std::size_t a = 0; a < order.size(); ++a) order[a] = a;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      return std::pair(o.lead[x].first, o.dims[x]) < std::pair(o.lead[y].first, o.dims[y]);
    });
    LeafSlices sorted;
    for (std::size_t a : order) sorted.lead.push_back(o.lead[a]), sorted.dims.push_back(o.dims[a]);
    o.lead = std::move(sorted.lead);
    o.dims = std::move(sorted.dims);
  }
}

// Stacked axes from the modules: a leaf with more leading dimensions than its module stores is stacked
// at the highest node under which every such leaf has the same leading size; every leaf under that
// node has the axis too. In a Haiku tree, every leaf under an unnamed hk.layer_stack has one.
void module_axes(const std::vector<FrameworkLeaf>& leaves, Naming naming, std::vector<LeafSlices>& out) {
  std::map<std::size_t, Shape> extra;  // an owned leaf's leading dimensions beyond its module's
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const FrameworkLeaf& lf = leaves[i];
    if (!lf.expected) continue;
    const Shape& want = *lf.expected;
    if (lf.shape.size() < want.size() || !std::equal(want.begin(), want.end(), lf.shape.end() - want.size()))
      refused("leaf '" + name_of(lf) + "' is " + py_tuple(lf.shape) + ", but " + lf.owner + " stores it as " +
              py_tuple(want));
    extra[i] = Shape(lf.shape.begin(), lf.shape.end() - want.size());
  }
  std::vector<std::pair<Path, std::pair<std::size_t, std::uint64_t>>> nodes;  // node -> (axis, size), first seen first
  const auto at = [&](const Path& node) {
    return std::find_if(nodes.begin(), nodes.end(), [&](const auto& n) { return n.first == node; });
  };
  for (const auto& [i, ex] : extra) {
    const Path& parts = leaves[i].parts;
    std::size_t lo = 0;
    for (std::size_t a = 0; a < ex.size(); ++a) {
      std::size_t p = lo;  // the highest node whose owned leaves all have this size at axis a
      for (; p < parts.size(); ++p) {
        const Path pre = prefix(parts, p);
        const bool same = std::all_of(extra.begin(), extra.end(), [&](const auto& o) {
          return !starts_with(leaves[o.first].parts, pre) || (o.second.size() > a && o.second[a] == ex[a]);
        });
        if (same) break;
      }
      if (p == parts.size() && p > lo) --p;  // none: the deepest
      const Path node = prefix(parts, p);
      if (auto it = at(node); it != nodes.end()) it->second = {a, ex[a]};
      else nodes.emplace_back(node, std::pair(a, ex[a]));
      lo = p;
    }
  }
  if (naming == Naming::haiku)
    for (const FrameworkLeaf& lf : leaves) {
      std::size_t a = 0;
      for (std::size_t p = 1; p < lf.parts.size(); ++p) {
        if (!haiku_stack(lf.parts[p - 1])) continue;
        const Path node = prefix(lf.parts, p);
        if (lf.shape.size() <= a)
          refused("leaf '" + name_of(lf) + "' lies under the hk.layer_stack '" + joined(node, lf.seps) +
                  "' but is " + py_tuple(lf.shape) + ", without a layer axis");
        if (at(node) == nodes.end()) nodes.emplace_back(node, std::pair(a, lf.shape[a]));
        ++a;
      }
    }
  std::stable_sort(nodes.begin(), nodes.end(), [](const auto& x, const auto& y) { return x.second.first < y.second.first; });
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const FrameworkLeaf& lf = leaves[i];
    for (const auto& [node, axis] : nodes) {
      const auto [a, size] = axis;
      if (!lies_under(lf, node)) continue;
      if (lf.shape.size() <= a || lf.shape[a] != size)
        refused("leaf '" + name_of(lf) + "' lies under the stacked '" + joined(node, lf.seps) + "' (" +
                std::to_string(size) + " slices) but is " + py_tuple(lf.shape));
      out[i].lead.emplace_back(node.size(), size);
    }
  }
}

// The slices' names, row-major, and their template (shard/composite.hpp: "{a}" where axis a's index
// goes, braces of the path itself doubled).
void name_slices(const FrameworkLeaf& lf, LeafSlices& o) {
  const auto with = [&](const Path& parts, const std::vector<std::string>& texts) {
    std::map<std::size_t, Path> at;
    for (std::size_t a = 0; a < o.lead.size(); ++a) at[o.lead[a].first].push_back(texts[a]);
    return joined(parts, lf.seps, at);
  };
  Path escaped;
  std::vector<std::string> axes;
  for (const auto& part : lf.parts) escaped.push_back(escape_template(part));
  for (std::size_t a = 0; a < o.lead.size(); ++a) axes.push_back("{" + std::to_string(a) + "}");
  o.name_template = with(escaped, axes);
  Shape index(o.lead.size(), 0), sizes;
  for (const auto& [p, size] : o.lead) sizes.push_back(size);
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return;  // an axis of no layers: no slices
  do {
    std::vector<std::string> texts;
    for (std::uint64_t i : index) texts.push_back(std::to_string(i));
    o.names.push_back(with(lf.parts, texts));
  } while (next_index(index, sizes));
}

}  // namespace

std::vector<LeafSlices> leaf_slices(const std::vector<FrameworkLeaf>& leaves, const std::optional<std::vector<std::string>>& stacked,
                                    Naming naming) {
  std::vector<LeafSlices> out(leaves.size());
  if (stacked)
    given_prefixes(leaves, *stacked, naming, out);
  else if (std::any_of(leaves.begin(), leaves.end(), [](const FrameworkLeaf& lf) { return !lf.recorded.empty(); }))
    recorded_axes(leaves, naming, out);
  else
    module_axes(leaves, naming, out);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const FrameworkLeaf& lf = leaves[i];
    LeafSlices& o = out[i];
    if (o.dims.empty())
      for (std::size_t a = 0; a < o.lead.size(); ++a) o.dims.push_back(a);
    for (std::size_t d = 0; d < lf.shape.size(); ++d)
      if (std::find(o.dims.begin(), o.dims.end(), d) == o.dims.end()) o.stored.push_back(lf.shape[d]);
    if (lf.expected && o.stored != *lf.expected)
      refused("leaf '" + name_of(lf) + "' is " + py_tuple(lf.shape) + " with " + std::to_string(o.lead.size()) +
              " stacked axes, but " + lf.owner + " stores it as " + py_tuple(*lf.expected));
    name_slices(lf, o);
  }
  return out;
}

}  // namespace layerinit

namespace layerinit {
namespace {

// A rule as the messages show what it gives: its fill, else its role.
std::string given(const LeafRule& r) {
  if (r.fill) return r.fill->describe();
  if (r.role) return std::string(role_name(*r.role));
  return "a rule without a fill";
}

}  // namespace

RulesOutcome apply_rules(const std::vector<LeafRule>& rules, const std::vector<RuledLeaf>& leaves) {
  RulesOutcome out;
  std::vector<bool> used(rules.size(), false);
  auto matches = [&](std::size_t r, const std::string& name) {
    const bool m = name_matches(rules[r].pattern, name);
    if (m) used[r] = true;
    return m;
  };
  for (const RuledLeaf& lf : leaves) {
    RuledLeafOutcome& o = out.leaves.emplace_back();
    if (!lf.integer.empty()) {
      for (std::size_t r = 0; r < rules.size(); ++r) {
        if (!matches(r, lf.name)) continue;
        const std::optional<FillSpec>& f = rules[r].fill;
        if (!f || f->kind != FillKind::constant || std::trunc(f->value) != f->value)
          refused("leaf '" + lf.name + "' is " + lf.integer + ": a rule gives an integer leaf an integer constant " +
                  "(\"constant(0)\"), not " + given(rules[r]));
        o.constant = f->value;
      }
      continue;
    }
    std::vector<bool> by_leaf(rules.size());  // a rule naming the leaf names each of its slices
    for (std::size_t r = 0; r < rules.size(); ++r) by_leaf[r] = matches(r, lf.name);
    o.storage = lf.storage;
    for (std::size_t r = 0; r < rules.size(); ++r) {
      if (rules[r].storage == WeightStorage::unknown) continue;
      bool hit = by_leaf[r];
      for (const std::string& s : lf.slices) hit = matches(r, s) || hit;
      if (hit) o.storage = rules[r].storage;
    }
    if (o.storage != WeightStorage::unknown && lf.slice.size() != 2)
      refused("leaf '" + lf.name + "' is " + py_tuple(lf.shape) + ": an orientation applies to 2-D weights");
    for (const std::string& s : lf.slices) {
      RuledLeafOutcome::Slice& slice = o.slices.emplace_back();
      for (std::size_t r = 0; r < rules.size(); ++r) {
        if (!by_leaf[r] && !matches(r, s)) continue;
        const LeafRule& rule = rules[r];
        if (rule.role) slice.role = rule.role;
        if (rule.fill) slice.fill = rule.fill;
        if (rule.fan_in) slice.fan_in = rule.fan_in;
        if (rule.fan_out) slice.fan_out = rule.fan_out;
      }
    }
  }
  for (std::size_t r = 0; r < rules.size(); ++r)
    if (!used[r]) out.unused.push_back(rules[r].pattern);
  return out;
}

}  // namespace layerinit
