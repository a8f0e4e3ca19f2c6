#!/usr/bin/env bash
# Builder::walk (init/builder.hpp) is the one traversal of a model's parts: outside init/, code that goes
# over them by hand (a loop over plan_pre/plan_layer/plan_post, over a spec's pre/post, up to its
# num_layers, or a call of for_each_layer_run) drifts from it. Fails naming file:line for each one in the
# library's folders, the tools and the Python binding. Usage: one_traversal.sh <source root>
set -euo pipefail
root=${1:?usage: one_traversal.sh <source root>}
dirs=(stacking shard plan checkpoint tools python/src)

patterns=(
  'for_each_layer_run'                                                        # walk's WalkMode::runs
  'for[[:space:]]*\(.*\b(plan_pre|plan_layer|plan_post)[[:space:]]*\('       # a loop over one-part lookups
  'for[[:space:]]*\([^;]*;[^;]*<[^;]*\bnum_layers[[:space:]]*;'              # a counted loop over the layers
  'for[[:space:]]*\([^;]*:[^;]*(\.|->)(pre|post)(\(\))?[[:space:]]*\)'       # a range-for over pre / post
  'for[[:space:]]*\([^;]*;[^;]*<[^;]*\.offset[[:space:]]*\+[^;]*\.size[[:space:]]*;'  # over a layer range
)

# Sites that match but walk something else: "path|text on the line|why".
allowed=(
  'stacking/stack.cpp|i < m.num_layers;|unstack: the per-layer views of a built Model'"'"'s stacked buffers'
  'tools/build_cmd.cpp|: model.pre)|the report hashes a built Model'"'"'s tensors'
  'tools/build_cmd.cpp|: model.post)|the report hashes a built Model'"'"'s tensors'
)

is_allowed() {  # path, line text
  local entry path text
  for entry in "${allowed[@]}"; do
    IFS='|' read -r path text _ <<<"$entry"
    [[ $1 == "$path" && $2 == *"$text"* ]] && return 0
  done
  return 1
}

found=0
for d in "${dirs[@]}"; do
  [[ -d $root/$d ]] || { echo "one_traversal: $root/$d is missing" >&2; exit 2; }
done
while IFS= read -r hit; do
  file=${hit%%:*}
  rest=${hit#*:}
  line=${rest%%:*}
  text=${rest#*:}
  [[ $text =~ ^[[:space:]]*// ]] && continue  # a comment
  rel=${file#"$root"/}
  is_allowed "$rel" "$text" && continue
  echo "$rel:$line: a traversal of the model outside Builder::walk:${text}"
  found=1
done < <(cd "$root" && for p in "${patterns[@]}"; do
           grep -rnE --include='*.cpp' --include='*.hpp' --include='*.cu' --include='*.cuh' "$p" "${dirs[@]}" || true
         done | sort -u -t: -k1,1 -k2,2n | sed "s|^|$root/|")
if ((found)); then
  echo "one_traversal: go over the parts with Builder::walk or RankPlan::walk (WalkMode::runs for sizes)" >&2
  exit 1
fi
echo "one_traversal: no traversal outside Builder::walk in ${dirs[*]}"
