import sys, torch, time
from hedgespec.models import load_target
from hedgespec.models.linear_kernels import PackedLinear, use_linear_kernels
from hedgespec.engine.target import TargetModel
from hedgespec.engine.bench import _copy_cache
th=int(sys.argv[1]); torch.set_num_threads(th)
model,tok=load_target("smollm2", linear_kernels="aten")
tgt=TargetModel(model,(1,14,26))
ctx=torch.randint(0,49152,(400,))
tgt.prefill(ctx[:150]); cached=tgt.cache
def run(r):
    tgt.cache,tgt.length=_copy_cache(cached),150
    tgt.forward(ctx[150:150+r])
def t(r, n=7):
    run(r); ts=[]
    for _ in range(n):
        a=time.perf_counter(); run(r); ts.append(time.perf_counter()-a)
    return min(ts)*1e3
rows=(1,2,3,4,5)
print(th,'aten', ' '.join('%d:%.1f'%(r,t(r)) for r in rows))
for hint in (5,):
    use_linear_kernels(model,"onednn",rows=hint if hint else 5)
    for m in model.modules():
        if isinstance(m,PackedLinear):
            m.rows_hint=hint; m._packed=None
            if hint is None:
                m._pack=(lambda self=m: (self.__dict__.__setitem__('_packed', self._packed if self._packed is not None else torch.ops.mkldnn._reorder_linear_weight(self.weight.detach())) or self._packed))
    print(th,'onednn hint',hint, ' '.join('%d:%.1f'%(r,t(r)) for r in rows))
    use_linear_kernels(model,"aten")
