;; `loop(n)`: calls `add` on two one-element f32 tensors n times, dropping each result.
;; `rank_loop(n)`: asks for the rank of a one-element tensor n times, the cheapest host call
;; that looks a handle up: the cost of crossing between guest and host.
(module
  (import "neuronlab" "tensor_create" (func $create (param i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "tensor_drop" (func $drop (param i32) (result i32)))
  (import "neuronlab" "op_lookup" (func $lookup (param i32 i32) (result i32)))
  (import "neuronlab" "op_call" (func $call (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "neuronlab" "tensor_rank" (func $rank (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "\00\00\80\3f")
  (data (i32.const 48) "add")
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10000))
  (func (export "loop") (param $n i32) (result i32)
    (local $id i32)
    (i32.store (i32.const 128) (call $create (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 16) (i32.const 4)))
    (i32.store (i32.const 132) (call $create (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 16) (i32.const 4)))
    (local.set $id (call $lookup (i32.const 48) (i32.const 3)))
    (block $done
      (loop $l
        (br_if $done (i32.eqz (local.get $n)))
        (if (i32.ne (call $call (local.get $id) (i32.const 128) (i32.const 2) (i32.const 0) (i32.const 0) (i32.const 136) (i32.const 1)) (i32.const 1))
          (then (return (i32.const -1))))
        (drop (call $drop (i32.load (i32.const 136))))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $l)))
    (i32.const 0))
  (func (export "rank_loop") (param $n i32) (result i32)
    (local $h i32)
    (local.set $h (call $create (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 16) (i32.const 4)))
    (block $done
      (loop $l
        (br_if $done (i32.eqz (local.get $n)))
        (if (i32.ne (call $rank (local.get $h)) (i32.const 0))
          (then (return (i32.const -1))))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $l)))
    (drop (call $drop (local.get $h)))
    (i32.const 0)))
