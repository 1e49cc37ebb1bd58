# Compares onnxruntime's outputs (MODEL.ort.json) with alk's (alk_MODEL/*.npy), per model named.
import json, os, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
for m in sys.argv[1:]:
    ort = json.load(open(m + '.ort.json'))
    alk = json.loads(subprocess.check_output(['python3', os.path.join(here, 'npy.py'), 'alk_' + m]))
    bad = []
    for k, v in ort.items():
        a = alk.get(k)
        if a is None or len(a) != len(v): bad.append((k, 'len', None if a is None else len(a), len(v))); continue
        for i, (x, y) in enumerate(zip(a, v)):
            if (abs(x - y) > 1e-6 * max(1, abs(y))): bad.append((k, i, x, y))
    print(m, 'EQUAL' if not bad else 'DIFF %d: %s' % (len(bad), bad[:5]))
