# Writes text-format ONNX models of the quantized ops (MODEL.txt, for protoc --encode) with
# random uint8/float constants as initializers (no inputs), seeded by argv[1]; prints their names.
import random, sys
random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
def tensor(name, dtype, dims, vals):
    # dtype: 1 float, 2 uint8, 6 int32
    s = 'initializer { name: "%s" data_type: %d ' % (name, dtype)
    s += ''.join('dims: %d ' % d for d in dims)
    if dtype == 1: s += ''.join('float_data: %r ' % v for v in vals)
    else: s += ''.join('int32_data: %d ' % v for v in vals)
    return s + '}\n'
def prod(d):
    p = 1
    for x in d: p *= x
    return p
def u8(n): return [random.randrange(256) for _ in range(n)]
def model(nodes, inits, outputs, opsets='opset_import { version: 13 }'):
    s = 'ir_version: 8\n' + opsets + '\ngraph { name: "g"\n' + nodes + inits
    for o, t in outputs: s += 'output { name: "%s" type { tensor_type { elem_type: %d } } }\n' % (o, t)
    return s + '}\n'
def node(op, ins, outs, attrs='', domain=''):
    s = 'node { op_type: "%s" ' % op + ''.join('input: "%s" ' % i for i in ins) + ''.join('output: "%s" ' % o for o in outs)
    if domain: s += 'domain: "%s" ' % domain
    return s + attrs + '}\n'
models = {}
# QLinearMatMul [3, 40] x [40, 5]
M, K, N = 3, 40, 5
models['qlmm'] = model(node('QLinearMatMul', ['a', 'as', 'az', 'b', 'bs', 'bz', 'ys', 'yz'], ['y']),
    tensor('a', 2, [M, K], u8(M*K)) + tensor('as', 1, [], [0.0123]) + tensor('az', 2, [], [113]) +
    tensor('b', 2, [K, N], u8(K*N)) + tensor('bs', 1, [], [0.0371]) + tensor('bz', 2, [], [97]) +
    tensor('ys', 1, [], [0.9]) + tensor('yz', 2, [], [120]), [('y', 2)], 'opset_import { version: 10 }')
# QLinearConv per-channel w scale, bias, pads
C, O, H, W = 3, 4, 6, 7
models['qlconv'] = model(node('QLinearConv', ['x', 'xs', 'xz', 'w', 'ws', 'wz', 'ys', 'yz', 'B'], ['y'],
      'attribute { name: "pads" ints: 1 ints: 0 ints: 1 ints: 2 type: INTS } attribute { name: "strides" ints: 1 ints: 2 type: INTS }'),
    tensor('x', 2, [1, C, H, W], u8(C*H*W)) + tensor('xs', 1, [], [0.02]) + tensor('xz', 2, [], [128]) +
    tensor('w', 2, [O, C, 3, 3], u8(O*C*9)) + tensor('ws', 1, [O], [0.011, 0.023, 0.007, 0.031]) + tensor('wz', 2, [], [131]) +
    tensor('ys', 1, [], [0.35]) + tensor('yz', 2, [], [100]) + tensor('B', 6, [O], [random.randrange(-3000, 3000) for _ in range(O)]),
    [('y', 2)], 'opset_import { version: 10 }')
# QuantizeLinear per axis, values designed to hit ties
xs = [random.randrange(-600, 600) / 4.0 for _ in range(24)]
models['ql'] = model(node('QuantizeLinear', ['x', 's', 'z'], ['y'], 'attribute { name: "axis" i: 1 type: INT }'),
    tensor('x', 1, [2, 3, 4], xs) + tensor('s', 1, [3], [0.5, 0.25, 1.0]) + tensor('z', 2, [3], [128, 3, 250]), [('y', 2)])
# MatMulInteger with per-column b zero point
models['mmi'] = model(node('MatMulInteger', ['a', 'b', 'az', 'bz'], ['y']),
    tensor('a', 2, [2, 3, 30], u8(180)) + tensor('b', 2, [30, 4], u8(120)) + tensor('az', 2, [], [77]) + tensor('bz', 2, [4], u8(4)),
    [('y', 6)], 'opset_import { version: 10 }')
# DynamicQuantizeLinear
models['dql'] = model(node('DynamicQuantizeLinear', ['x'], ['y', 'ys', 'yz']),
    tensor('x', 1, [50], [random.uniform(-3, 7) for _ in range(50)]), [('y', 2), ('ys', 1), ('yz', 2)], 'opset_import { version: 11 }')
# QLinearAdd / QLinearMul (com.microsoft), broadcast b over rows
for op in ['QLinearAdd', 'QLinearMul']:
    models[op] = model(node(op, ['a', 'as', 'az', 'b', 'bs', 'bz', 'cs', 'cz'], ['c'], domain='com.microsoft'),
        tensor('a', 2, [4, 6], u8(24)) + tensor('as', 1, [], [0.031]) + tensor('az', 2, [], [120]) +
        tensor('b', 2, [6], u8(6)) + tensor('bs', 1, [], [0.017]) + tensor('bz', 2, [], [9]) +
        tensor('cs', 1, [], [0.05 if op == 'QLinearAdd' else 0.02]) + tensor('cz', 2, [], [127]),
        [('c', 2)], 'opset_import { version: 13 } opset_import { domain: "com.microsoft" version: 1 }')
for k, v in models.items():
    open(k + '.txt', 'w').write(v)
print(' '.join(models))
