/* kernel_ab.c — A/B of two builds of the AVX-512 AdamW kernel in one process (scripts/kernel_ab.sh):
 * "base" (collage__adamw_block_avx512, from a git revision) against "var" (collage__adamw_block_var,
 * the working tree's adamw_kernel.inc). Both step copies of the same state; after three warm-up steps
 * and one EDQ step the states and EDQ sums are compared, then EDQ-off and EDQ-on steps of each are
 * timed in interleaved rounds (best round of each). Usage: kernel_ab STRATEGY N ROUNDS STEPS; env B2
 * (β2, default 0.95), NT (1: the var kernel's nt loops where its proof allows), OMP_NUM_THREADS.
 * Every strategy: the fp32-path ones (fp32, bf16-fp32-states, bf16-master) keep fp32 moments, fp32
 * weights and gradients for fp32, and an fp32 master for bf16-master. A tool for kernel work, not part
 * of the library or the tests. */
#include "adamw_impl.h"
#include "collage.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
void collage__adamw_block_var(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k, adamw_acc *acc);
int collage__adamw_block_var_tie_free(int kind, float c);
typedef void (*kfn)(collage_strategy, const adamw_slabs *, size_t, size_t, const adamw_k *, adamw_acc *);
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static uint64_t rs=88172645463325252ull;
static double urand(void){rs^=rs<<13;rs^=rs>>7;rs^=rs<<17;return (rs>>11)*(1.0/9007199254740992.0);}
static double nrand(void){double u=urand()+1e-300,v=urand();return sqrt(-2*log(u))*cos(6.283185307179586*v);}
static uint16_t bf(float x){uint32_t u;memcpy(&u,&x,4);return (uint16_t)((u+0x7fff+((u>>16)&1))>>16);}
/* Every slab is allocated for 4-byte words; es_w, es_g and es_mv say how many bytes the words of w, g
 * and m, v take (c and dv are always bf16, ms fp32). */
typedef struct { uint16_t *w,*g,*m,*v,*c,*dv; float *ms; } st;
static size_t es_w=2, es_g=2, es_mv=2; /* set in main from the strategy */
static void put(void *p,size_t i,size_t es,float x){ if(es==4) ((float*)p)[i]=x; else ((uint16_t*)p)[i]=bf(x); }
static float bff(float x){uint16_t h=bf(x);uint32_t u=(uint32_t)h<<16;float f;memcpy(&f,&u,4);return f;}
static void mk(st *S,size_t n){
  S->w=aligned_alloc(64,n*4);S->g=aligned_alloc(64,n*4);S->m=aligned_alloc(64,n*4);S->v=aligned_alloc(64,n*4);
  S->c=aligned_alloc(64,n*4);S->dv=aligned_alloc(64,n*4);S->ms=aligned_alloc(64,n*4);
  for(size_t i=0;i<n;i++){float g=0.01f*(float)nrand(),w=(float)nrand()*0.05f;
    put(S->w,i,es_w,w);put(S->g,i,es_g,g);put(S->m,i,es_mv,0.1f*g);put(S->v,i,es_mv,g*g*0.05f+1e-8f);
    S->c[i]=0;S->dv[i]=0;S->ms[i]=es_w==2?bff(w):w;}
}
static void cp(st *D,const st *S,size_t n){memcpy(D->w,S->w,n*es_w);memcpy(D->g,S->g,n*es_g);memcpy(D->m,S->m,n*es_mv);memcpy(D->v,S->v,n*es_mv);memcpy(D->c,S->c,n*2);memcpy(D->dv,S->dv,n*2);memcpy(D->ms,S->ms,n*4);}
static void step(kfn f,int s,st *S,size_t n,int edq,int t,float b2,adamw_acc *tot){
  adamw_k k={0};
  float b1=0.9f; k.b1=b1;k.omb1=1-b1;k.b2=b2;k.omb2=1-b2;k.eps=1e-8f;
  k.neg_step=(float)(-1e-3*sqrt(1-pow(b2,t))/(1-pow(b1,t)));k.lrwd=1e-3f*0.1f;k.coef=1;k.clip=0;
  /* NT=1: the nt loops where the var kernel proves this step's scalars tie-free, as adamw.c does (a
   * base revision without them ignores the flag) */
  /* the proof takes 3-17 µs a scalar, as long as a step of 32768 parameters: done once per t (as
   * adamw.c caches it), not inside the timed steps */
  static int nt_of[1<<12]; /* level + 1, 0 = not yet known */
  int known=t>=0&&t<(1<<12)&&nt_of[t];
  k.b2hi=bf(b2); { float hi; uint32_t u=(uint32_t)k.b2hi<<16; memcpy(&hi,&u,4); k.b2lo=bf(b2-hi);} k.key=12345+t;k.index0=0;
  if(known) k.nt=nt_of[t]-1;
  else {
    k.nt=getenv("NT")&&atoi(getenv("NT"))&&collage__adamw_block_var_tie_free(0,k.neg_step)&&
         collage__adamw_block_var_tie_free(1,k.eps)&&collage__adamw_block_var_tie_free(0,k.lrwd);
    { float bh; uint32_t u=(uint32_t)k.b2hi<<16; memcpy(&bh,&u,4); /* level 2: bf16(β2) too, as adamw.c */
      if(k.nt&&k.b2hi!=0x3f80&&collage__adamw_block_var_tie_free(0,bh)) k.nt=2; }
    if(t>=0&&t<(1<<12)) nt_of[t]=k.nt+1;
  }
  adamw_slabs Sl={S->w,S->g,S->m,S->v,S->c,S->dv,S->ms};
  if(!tot){
    long nb=(long)((n+(1<<14)-1)>>14);
    #pragma omp parallel for schedule(static)
    for(long bi=0;bi<nb;bi++){size_t a=(size_t)bi<<14; size_t b=a+(1<<14)<n?a+(1<<14):n; adamw_acc acc; memset(&acc,0,sizeof acc); f((collage_strategy)s,&Sl,a,b,&k,edq?&acc:NULL);}
    return;
  }
  adamw_acc acc;
  for(size_t a=0;a<n;a+=1<<14){size_t b=a+(1<<14)<n?a+(1<<14):n; memset(&acc,0,sizeof acc); f((collage_strategy)s,&Sl,a,b,&k,edq?&acc:NULL);
    if(tot){tot->dot+=acc.dot;tot->dot_state+=acc.dot_state;tot->nn+=acc.nn;tot->lost+=acc.lost;tot->nonzero+=acc.nonzero;}}
}
int main(int argc,char**argv){
  if(argc<5){fprintf(stderr,"usage: kernel_ab STRATEGY N ROUNDS STEPS\n");return 2;}
  collage_strategy cs; if(collage_strategy_parse(argv[1],&cs)!=COLLAGE_OK){fprintf(stderr,"kernel_ab: unknown strategy %s\n",argv[1]);return 2;}
  if(cs==COLLAGE_FP32||cs==COLLAGE_BF16_FP32_STATES||cs==COLLAGE_BF16_MASTER){es_mv=4; if(cs==COLLAGE_FP32) es_w=es_g=4;}
  int s=(int)cs; size_t n=(size_t)atol(argv[2]); int reps=atoi(argv[3]); int inner=atoi(argv[4]);
  if(n<64||reps<1||inner<1){fprintf(stderr,"kernel_ab: N >= 64, ROUNDS and STEPS >= 1\n");return 2;}
  float b2=getenv("B2")?(float)atof(getenv("B2")):0.95f;
  st A,B; mk(&A,n); B=A; mk(&B,n); cp(&B,&A,n);
  kfn base=collage__adamw_block_avx512, var=collage__adamw_block_var;
  /* warm & equality check */
  for(int t=1;t<=3;t++){ step(base,s,&A,n,0,t,b2,NULL); step(var,s,&B,n,0,t,b2,NULL);}
  adamw_acc ta={0},tb={0};
  step(base,s,&A,n,1,4,b2,&ta); step(var,s,&B,n,1,4,b2,&tb);
  int same=!memcmp(A.w,B.w,n*es_w)&&!memcmp(A.m,B.m,n*es_mv)&&!memcmp(A.v,B.v,n*es_mv)&&!memcmp(A.c,B.c,n*2)&&!memcmp(A.dv,B.dv,n*2)&&!memcmp(A.ms,B.ms,n*4);
  int esame=ta.dot==tb.dot&&ta.dot_state==tb.dot_state&&ta.nn==tb.nn&&ta.lost==tb.lost&&ta.nonzero==tb.nonzero;
  printf("%s n=%zu states %s, EDQ sums %s; base dot=%.9g st=%.9g nn=%.9g lost=%llu nz=%llu | var dot=%.9g st=%.9g nn=%.9g lost=%llu nz=%llu\n",argv[1],n,same?"identical":"DIFFER",esame?"identical":"DIFFER",
    ta.dot,ta.dot_state,ta.nn,(unsigned long long)ta.lost,(unsigned long long)ta.nonzero,tb.dot,tb.dot_state,tb.nn,(unsigned long long)tb.lost,(unsigned long long)tb.nonzero);
  /* timing: configs base0 base1 var0 var1, interleaved; min over reps of mean over inner */
  double best[4]={1e9,1e9,1e9,1e9};
  for(int r=0;r<reps;r++) for(int c=0;c<4;c++){ kfn f=c<2?base:var; st *S=c<2?&A:&B; int e=c&1;
    double t0=now(); for(int i=0;i<inner;i++) step(f,s,S,n,e,5+i,b2,NULL); double dt=(now()-t0)/inner/n*1e9; if(dt<best[c])best[c]=dt;}
  printf("ns/param base: off %.4f on %.4f (EDQ %+.1f%%) | var: off %.4f on %.4f (EDQ %+.1f%%) | var/base off %.3f on %.3f\n",
    best[0],best[1],100*(best[1]/best[0]-1),best[2],best[3],100*(best[3]/best[2]-1),best[2]/best[0],best[3]/best[1]);
  return 0;
}
