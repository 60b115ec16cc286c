#!/usr/bin/env bash
# Installs the Debian packages that integration tests run for real: kcat (librdkafka's
# command-line client), ZooKeeper, Prometheus (it scrapes a broker's /metrics) and
# Chromium (the web console's browser tests drive it through Playwright) and a JDK (javac
# builds the Spark JVM reader, scripts/build-spark-jar.sh; its java also runs PySpark,
# which otherwise needs a Java runtime from the system). Does nothing when they are
# already present.
set -euo pipefail
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
[ -x /usr/share/zookeeper/bin/zkServer.sh ] || need+=(zookeeper)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)   # 17 on bookworm
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages ${need[*]}: run 'sudo apt-get install ${need[*]}'" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
