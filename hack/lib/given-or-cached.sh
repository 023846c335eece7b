# Sourced by the hack/ scripts that find a tool or build it once: the tool an environment
# variable names, else the cached build, printed and the script ended; otherwise nothing
# happens and the script goes on to build it.
#
#   given_or_cached VARIABLE CACHED_PATH [EXTRA_FILE_THAT_MUST_EXIST]
given_or_cached() {
  local variable=$1 cached=$2 extra=${3:-}
  local given=${!variable:-}
  if [[ -n $given ]]; then
    [[ -x $given ]] || { echo "$variable=$given is not an executable" >&2; exit 1; }
    echo "$given"
    exit 0
  fi
  if [[ -x $cached && (-z $extra || -f $extra) ]]; then
    echo "$cached"
    exit 0
  fi
}
