"""A real JVM as the oracle for Java int arithmetic: String.hashCode and Kafka's own Utils.abs.

The program is compiled against the kafka-clients jar the Kafka harness resolved, so ``abs`` is the
broker's Utils.abs, not our reading of it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.kafka_dist import classpath, kafka_libs

_SOURCE = """\
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.utils.Utils;

public class HashOracle {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split(" ");
            char[] units = new char[parts[0].length() / 4];
            for (int i = 0; i < units.length; i++) {
                units[i] = (char) Integer.parseInt(parts[0].substring(4 * i, 4 * i + 4), 16);
            }
            String topic = new String(units);
            int partition = Integer.parseInt(parts[1]);
            int h = topic.hashCode();
            out.append(h).append(' ').append(Utils.abs(31 * h + partition)).append('\\n');
        }
        System.out.print(out);
    }
}
"""


def java_hashes(workdir: Path, items: list[tuple[str, int]]) -> list[tuple[int, int]]:
    """For each (topic, partition): (topic.hashCode(), Utils.abs(31 * hashCode + partition)) from a JVM."""
    javac = shutil.which("javac")
    java = shutil.which("java")
    if javac is None or java is None:
        raise RuntimeError("the Java oracle needs javac and java on PATH")
    clients = next(kafka_libs().glob("kafka-clients-*.jar"))
    source = workdir / "HashOracle.java"
    source.write_text(_SOURCE)
    subprocess.run(
        [javac, "-cp", str(clients), "-d", str(workdir), str(source)], check=True, capture_output=True
    )
    # Topics travel as UTF-16 code units in hex so lone surrogates and non-BMP characters arrive intact.
    lines = []
    for topic, partition in items:
        data = topic.encode("utf-16-be", "surrogatepass")
        lines.append(f"{data.hex()} {partition}")
    # Utils pulls in SLF4J when it loads, so run with the broker's whole runtime classpath.
    proc = subprocess.run(
        [java, "-cp", f"{workdir}:{classpath()}", "HashOracle"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    return [(int(a), int(b)) for a, b in (line.split() for line in proc.stdout.splitlines())]
