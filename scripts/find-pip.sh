# Sourced by the fetch scripts: sets $pip to a working `python -m pip`
# (the first python3 on the PATH, else Debian's), installing python3-pip
# from Debian when neither has one. Wheels are only downloaded and unzipped,
# never installed, so any pip will do.
pip=""
for py in python3 /usr/bin/python3; do
  if command -v "$py" > /dev/null && "$py" -m pip --version > /dev/null 2>&1; then pip="$py -m pip"; break; fi
done
if [ -z "$pip" ]; then
  echo "$(basename "$0"): installing python3-pip"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-pip > /dev/null
  pip="/usr/bin/python3 -m pip"
fi
