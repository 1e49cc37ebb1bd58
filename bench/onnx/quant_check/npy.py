# The .npy files of a directory (alk onnx run --out) as JSON lists by file stem.
import struct, sys, json, os, ast
def read(p):
    b = open(p, 'rb').read()
    hl = struct.unpack('<H', b[8:10])[0]
    h = ast.literal_eval(b[10:10+hl].decode('latin1'))
    d = b[10+hl:]
    fmt = {'|u1': 'B', '<f4': 'f', '<i4': 'i', '<i8': 'q', '<f8': 'd'}[h['descr']]
    n = len(d) // struct.calcsize(fmt)
    return list(struct.unpack('<%d%s' % (n, fmt), d))
d = sys.argv[1]
print(json.dumps({os.path.splitext(f)[0]: read(os.path.join(d, f)) for f in sorted(os.listdir(d))}))
